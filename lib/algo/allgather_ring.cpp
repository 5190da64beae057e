#include <cstring>

#include "algo/algorithms.hpp"

namespace hiercoll::algo {

void allgather_ring(Channel& ch, const void* in, void* out, size_t send_count, DataType type) {
  const size_t elem = dtype_size(type);
  const int n = ch.size(), r = ch.rank();
  auto* own = static_cast<uint8_t*>(out) + static_cast<size_t>(r) * send_count * elem;
  copy_bytes(own, in, send_count * elem);  // in == own is the in-place form
  if (n == 1 || send_count == 0) return;
  ring_phase_allgather(ch, out, Segments::blocks(send_count, n), elem);
}

}  // namespace hiercoll::algo
