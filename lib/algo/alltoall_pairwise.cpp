// Pairwise exchange: in round s every rank sends to r+s and receives from r-s, all rounds posted at once.
#include <cstring>

#include "algo/algorithms.hpp"

namespace hiercoll::algo {

void alltoall_pairwise(Channel& ch, const void* in, void* out, size_t block) {
  const int n = ch.size(), r = ch.rank();
  if (block == 0) return;
  auto* source = static_cast<const uint8_t*>(in);
  auto* target = static_cast<uint8_t*>(out);
  if (in == out && n > 1) {  // in place: send from a copy, since receives overwrite blocks not yet sent
    void* copy = ch.scratch().get(block * static_cast<size_t>(n), 1);
    std::memcpy(copy, in, block * static_cast<size_t>(n));
    source = static_cast<const uint8_t*>(copy);
  }
  copy_bytes(target + r * block, source + r * block, block);
  std::vector<RequestPtr> requests;
  for (int s = 1; s < n; ++s) {
    int from = (r - s + n) % n, to = (r + s) % n;
    requests.push_back(ch.recv(from, 0, target + static_cast<size_t>(from) * block, block));
    requests.push_back(ch.send(to, 0, source + static_cast<size_t>(to) * block, block));
  }
  ch.wait_all(requests);
}

}  // namespace hiercoll::algo
