// Sharded reduction servers (the inter-node scheme of SageMaker's data-parallel library, "Herring", SC20): the
// buffer is cut into n parts and rank j serves part j. Every rank sends part j to rank j, all n-1 sends at once;
// rank j reduces the n-1 parts it receives into its own as they arrive and sends the result back to every rank,
// again all at once. Two network steps whatever n is (the ring takes 2(n-1)), and each rank sends and receives
// 2(n-1)/n of the buffer, as in the ring. Pipelined in chunks: chunk c of every part crosses the network while
// chunk c-1 is being reduced and returned, with up to `slots` chunks' receives posted ahead. Every rank ends with the
// same bits: each part is reduced once, by its server, in rank order.
#include <algorithm>
#include <vector>

#include "algo/algorithms.hpp"
#include "reduce/reduce.hpp"

namespace hiercoll::algo {

ShardedChunks ShardedChunks::of(size_t count, int n, size_t elem, const AlgoConfig& config) {
  ShardedChunks plan;
  plan.parts = Segments::aligned(count, n, std::max<size_t>(1, 64 / elem));
  // The first chunk's scatter and the last one's return overlap nothing, so a part cut into k chunks takes about
  // (k + 1) / k of the link time: at least kMinChunks per part, down to kFloorBytes. And at most kMaxBytes per
  // message: a server's chunk is done only when the slowest of its n-1 incoming flows has delivered it, and flows
  // sharing a link progress unevenly over large messages, so larger ones lost to smaller ones on the emulated
  // cluster (`git log -S kFloorBytes` has the figures).
  constexpr size_t kMinChunks = 8, kFloorBytes = 32 << 10, kMaxBytes = 128 << 10;
  size_t largest = 0;
  for (int p = 0; p < n; ++p) largest = std::max(largest, plan.parts.count[p]);
  const size_t ceiling = std::max<size_t>(1, std::min(config.chunk_bytes, kMaxBytes) / elem);
  plan.chunk = std::min(ceiling, std::max(kFloorBytes / elem, (largest + kMinChunks - 1) / kMinChunks));
  plan.chunks = (largest + plan.chunk - 1) / plan.chunk;
  return plan;
}

void allreduce_sharded(Channel& ch, const void* in, void* out, size_t count, DataType type, ReduceOp op) {
  const size_t elem = dtype_size(type);
  const int n = ch.size(), me = ch.rank();
  if (n == 1 || count == 0) {
    copy_bytes(out, in, count * elem);
    return;
  }
  const ReduceOp partial = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  const ShardedChunks plan = ShardedChunks::of(count, n, elem, ch.config());
  const Segments& parts = plan.parts;
  const size_t chunk = plan.chunk, chunks = plan.chunks;
  const size_t slots = std::min<size_t>(static_cast<size_t>(std::max(1, ch.config().slots)), chunks);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  const bool in_place = src == dst;

  // Chunk c of part p: [begin, begin + len) elements of the whole buffer (len 0 past the part's end: both sides
  // skip that message alike).
  auto range = [&](int p, size_t c) {
    const size_t begin = std::min(parts.count[p], c * chunk);
    return std::make_pair(parts.offset[p] + begin, std::min(parts.count[p], begin + chunk) - begin);
  };
  // Slot (c % slots) of scratch buffer 0 holds chunk c from each of the n-1 other ranks (phase 1). In place, the
  // servers' results for chunk c land in buffer 1 and are copied out once this rank's own sends of that memory
  // have completed (until then the transport may still read it); out of place they land in `out` directly.
  const size_t slot_bytes = static_cast<size_t>(n) * chunk * elem;
  auto* landing = static_cast<uint8_t*>(ch.scratch().get(slots * slot_bytes, 0));
  auto* returning = in_place ? static_cast<uint8_t*>(ch.scratch().get(slots * slot_bytes, 1)) : nullptr;
  auto slot_at = [&](uint8_t* base, int from, size_t c) {
    return base + (c % slots) * slot_bytes + from * chunk * elem;
  };
  auto step_of = [](size_t c, int phase) { return static_cast<uint32_t>(2 * c + phase); };

  // Requests by chunk and peer; a null one is a message of no elements, never posted.
  std::vector<std::vector<RequestPtr>> gather(chunks, std::vector<RequestPtr>(n)),
      scatter(chunks, std::vector<RequestPtr>(n)), returned(chunks, std::vector<RequestPtr>(n));
  std::vector<RequestPtr> results;  // this rank's reduced chunks going back out
  // Chunk c's receives of both phases are posted before its sends, so every server's result finds its receive
  // posted (on providers with a rendezvous protocol an unexpected large message waits for one).
  auto post = [&](size_t c) {
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      const size_t mine = range(me, c).second;
      if (mine > 0) gather[c][p] = ch.recv(p, step_of(c, 0), slot_at(landing, p, c), mine * elem);
      const auto [begin, len] = range(p, c);
      if (len > 0) {
        uint8_t* to = in_place ? slot_at(returning, p, c) : dst + begin * elem;
        returned[c][p] = ch.recv(p, step_of(c, 1), to, len * elem);
      }
    }
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      const auto [begin, len] = range(p, c);
      if (len > 0) scatter[c][p] = ch.send(p, step_of(c, 0), src + begin * elem, len * elem);
    }
  };

  for (size_t c = 0; c < slots; ++c) post(c);
  for (size_t c = 0; c < chunks; ++c) {
    const auto [begin, len] = range(me, c);
    if (len > 0) {
      // Serve chunk c of this rank's part: own data first, then every other rank's in rank order.
      uint8_t* served = dst + begin * elem;
      copy_bytes(served, src + begin * elem, len * elem);
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;
        ch.wait(gather[c][p]);
        reduce::reduce(served, served, slot_at(landing, p, c), len, type, partial);
        gather[c][p].reset();
      }
      if (op == ReduceOp::kAvg) reduce::divide(served, len, type, n);
      for (int p = 0; p < n; ++p) {
        if (p != me) results.push_back(ch.send(p, step_of(c, 1), served, len * elem));
      }
    }
    if (in_place) {  // free chunk c's return slot: its results go where this rank's sends of chunk c read from
      for (int p = 0; p < n; ++p) {
        if (!returned[c][p]) continue;
        const auto [at, count_back] = range(p, c);
        ch.wait(scatter[c][p]);
        ch.wait(returned[c][p]);
        copy_bytes(dst + at * elem, slot_at(returning, p, c), count_back * elem);
        returned[c][p].reset();
        scatter[c][p].reset();
      }
    }
    if (c + slots < chunks) post(c + slots);  // chunk c's slots are free again
  }
  auto wait_posted = [&](std::vector<RequestPtr>& requests) {
    for (auto& request : requests) {
      if (request) ch.wait(request);
    }
  };
  for (auto& by_peer : returned) wait_posted(by_peer);
  for (auto& by_peer : scatter) wait_posted(by_peer);
  wait_posted(results);
}

}  // namespace hiercoll::algo
