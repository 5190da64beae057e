// Ring reduce-scatter: partial sums travel through scratch so the caller's input is never written.
#include <cstring>

#include "algo/algorithms.hpp"
#include "reduce/reduce.hpp"

namespace hiercoll::algo {

void reduce_scatter_ring(Channel& ch, const void* in, void* out, size_t recv_count, DataType type, ReduceOp op) {
  const size_t elem = dtype_size(type);
  const int n = ch.size(), r = ch.rank();
  if (recv_count == 0) return;
  const auto* own_in = static_cast<const uint8_t*>(in) + static_cast<size_t>(r) * recv_count * elem;
  if (n == 1) {
    if (own_in != out) std::memmove(out, own_in, recv_count * elem);  // recv_count > 0 here
    return;
  }
  void* work = ch.scratch().get(static_cast<size_t>(n) * recv_count * elem, 1);
  ring_phase_reduce_scatter(ch, in, work, out, Segments::blocks(recv_count, n), type, op);
  if (op == ReduceOp::kAvg) reduce::divide(out, recv_count, type, n);
}

}  // namespace hiercoll::algo
