// Pipelined chain broadcast: root -> root+1 -> ... ; each rank forwards a chunk as soon as it lands,
// so for large messages the time is about one message transfer plus (n-2) chunk transfers.
#include <algorithm>
#include <cstring>

#include "algo/algorithms.hpp"

namespace hiercoll::algo {

void broadcast_chain(Channel& ch, const void* in, void* out, size_t bytes, int root) {
  const int n = ch.size(), r = ch.rank();
  if (ch.rank() == root) copy_bytes(out, in, bytes);
  if (n == 1 || bytes == 0) return;
  const int position = (r - root + n) % n;
  const int previous = (r - 1 + n) % n, next = (r + 1) % n;
  const bool last = position == n - 1;
  const size_t chunk = std::max<size_t>(1, ch.config().chunk_bytes);
  const size_t chunks = (bytes + chunk - 1) / chunk;
  auto* data = static_cast<uint8_t*>(out);
  auto length = [&](size_t c) { return std::min(chunk, bytes - c * chunk); };

  std::vector<RequestPtr> sends;
  if (position == 0) {
    for (size_t c = 0; c < chunks; ++c)
      sends.push_back(ch.send(next, static_cast<uint32_t>(c), data + c * chunk, length(c)));
  } else {
    std::vector<RequestPtr> recvs;
    for (size_t c = 0; c < chunks; ++c)
      recvs.push_back(ch.recv(previous, static_cast<uint32_t>(c), data + c * chunk, length(c)));
    for (size_t c = 0; c < chunks; ++c) {
      ch.wait(recvs[c]);
      if (!last) sends.push_back(ch.send(next, static_cast<uint32_t>(c), data + c * chunk, length(c)));
    }
  }
  ch.wait_all(sends);
}

}  // namespace hiercoll::algo
