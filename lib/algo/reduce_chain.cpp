// Pipelined chain reduce towards the root: the rank farthest from the root sends its chunks, each rank
// on the way adds its own and forwards, the root adds its own last. Only the root's `out` is written.
#include <algorithm>
#include <cstring>

#include "algo/algorithms.hpp"
#include "reduce/reduce.hpp"

namespace hiercoll::algo {

void reduce_chain(Channel& ch, const void* in, void* out, size_t count, DataType type, ReduceOp op, int root) {
  const size_t elem = dtype_size(type);
  const int n = ch.size(), r = ch.rank();
  if (count == 0) return;
  if (n == 1) {
    copy_bytes(out, in, count * elem);
    return;
  }
  // Position 0 is the root; data flows from position n-1 down to 0.
  const int position = (r - root + n) % n;
  const int upstream = (r + 1) % n, downstream = (r - 1 + n) % n;
  const size_t chunk = std::max<size_t>(1, ch.config().chunk_bytes / elem);
  const size_t chunks = (count + chunk - 1) / chunk;
  auto length = [&](size_t c) { return std::min(chunk, count - c * chunk); };
  auto* input = static_cast<const uint8_t*>(in);

  std::vector<RequestPtr> sends;
  if (position == n - 1) {
    for (size_t c = 0; c < chunks; ++c) {
      sends.push_back(ch.send(downstream, static_cast<uint32_t>(c), input + c * chunk * elem, length(c) * elem));
    }
    ch.wait_all(sends);
    return;
  }
  // Middle ranks accumulate into scratch (it must outlive the send); the root into `out`.
  auto* accumulated =
      position == 0 ? static_cast<uint8_t*>(out) : static_cast<uint8_t*>(ch.scratch().get(count * elem, 1));
  const size_t slots = std::min<size_t>(chunks, static_cast<size_t>(std::max(1, ch.config().slots)));
  auto* slot_memory = static_cast<uint8_t*>(ch.scratch().get(slots * chunk * elem, 0));
  std::vector<RequestPtr> recvs(chunks);
  auto post_recv = [&](size_t c) {
    recvs[c] = ch.recv(upstream, static_cast<uint32_t>(c), slot_memory + (c % slots) * chunk * elem, length(c) * elem);
  };
  for (size_t c = 0; c < slots; ++c) post_recv(c);
  for (size_t c = 0; c < chunks; ++c) {
    ch.wait(recvs[c]);
    uint8_t* dst = accumulated + c * chunk * elem;
    reduce::reduce(dst, input + c * chunk * elem, slot_memory + (c % slots) * chunk * elem, length(c), type, op);
    recvs[c].reset();
    if (c + slots < chunks) post_recv(c + slots);
    if (position != 0) sends.push_back(ch.send(downstream, static_cast<uint32_t>(c), dst, length(c) * elem));
  }
  ch.wait_all(sends);
  if (position == 0 && op == ReduceOp::kAvg) reduce::divide(out, count, type, n);
}

}  // namespace hiercoll::algo
