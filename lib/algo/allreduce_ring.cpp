// Ring allreduce = ring reduce-scatter into `out`, average on the owned segment, ring allgather of `out`.
// Every rank ends with bit-identical results, since each segment is reduced once and then copied.
#include <cstring>

#include "algo/algorithms.hpp"
#include "reduce/reduce.hpp"

namespace hiercoll::algo {

void allreduce_ring(Channel& ch, const void* in, void* out, size_t count, DataType type, ReduceOp op) {
  const size_t elem = dtype_size(type);
  const int n = ch.size(), r = ch.rank();
  if (n == 1 || count == 0) {
    copy_bytes(out, in, count * elem);
    return;
  }
  Segments segments = Segments::even(count, n);
  auto* own = static_cast<uint8_t*>(out) + segments.offset[r] * elem;
  ring_phase_reduce_scatter(ch, in, out, own, segments, type, op);
  if (op == ReduceOp::kAvg) reduce::divide(own, segments.count[r], type, n);
  ring_phase_allgather(ch, out, segments, elem);
}

}  // namespace hiercoll::algo
