// Hierarchical allreduce for N nodes x L ranks, in pieces of the node arena's area size:
//   (1) intra-node reduce-scatter: each rank copies its piece into its shared-memory area, and after a
//       node barrier reduces shard `local_rank` of the piece over all L areas (in local-rank order);
//   (2) inter-node allreduce of that shard among the ranks with the same local rank (one ring per local
//       rank, so all L ranks and the node's NICs work in parallel, each on 1/L of the data);
//   (3) intra-node allgather: each rank publishes its finished shard in its area and, after a second
//       barrier, copies the other L-1 shards out.
// The phases are software-pipelined: the inter-node phase of piece p runs on a helper thread while this
// thread does the reduce-scatter of piece p+1 and then the allgather of piece p-1.
// Pieces rotate through three buffer sets: a rank writes set s for piece p+3 only after passing the
// reduce-scatter barrier of piece p+2, which every rank reaches only after copying out piece p. The
// rotation runs across operations (Hierarchy::pieces_done), since a fast rank may begin the next
// allreduce while a slow one still copies out the last piece of this one.
#include <algorithm>
#include <cstring>

#include "algo/algorithms.hpp"
#include "algo/background.hpp"
#include "algo/hierarchy.hpp"
#include "reduce/reduce.hpp"

namespace hiercoll::algo {
namespace {

void inter_node_allreduce(Channel& rail, const Hierarchy& h, void* data, size_t count, DataType type, ReduceOp op) {
  if (rail.size() == 1 || count == 0) return;
  if (count * dtype_size(type) <= h.small_message_bytes) {
    allreduce_recursive_doubling(rail, data, data, count, type, op);
  } else {
    allreduce_ring(rail, data, data, count, type, op);
  }
}

}  // namespace

void allreduce_hier(Channel& ch, Hierarchy& h, const void* in, void* out, size_t count, DataType type, ReduceOp op) {
  const size_t elem = dtype_size(type);
  const int world = ch.size();
  const ReduceOp partial = op == ReduceOp::kAvg ? ReduceOp::kSum : op;  // divide once, at the very end
  if (h.arena == nullptr) {                                             // alone on the node: only the inter-node phase
    Channel rail = ch.subgroup(h.rail, h.node, 0);
    copy_bytes(out, in, count * elem);
    inter_node_allreduce(rail, h, out, count, type, partial);
    if (op == ReduceOp::kAvg) reduce::divide(out, count, type, world);
    return;
  }
  transport::NodeArena& arena = *h.arena;
  const int L = h.local_size, l = h.local_rank;
  const size_t piece = std::max<size_t>(1, arena.area_bytes() / elem);
  const auto* input = static_cast<const uint8_t*>(in);
  auto* output = static_cast<uint8_t*>(out);
  // Inner steps per piece are bounded by 2 N (chunks per shard + 1); pieces get disjoint step ranges.
  const size_t chunk = std::max<size_t>(1, ch.config().chunk_bytes / elem);
  const uint32_t stride = static_cast<uint32_t>(2 * h.rail.size() * ((piece / L) / chunk + 2) + 8);

  // Ranks of a node compare this at every reduce-scatter barrier: a count or type mismatch inside the
  // node would otherwise go unnoticed (shared memory has no message sizes to check).
  const uint64_t signature = (static_cast<uint64_t>(count) << 16) ^ (static_cast<uint64_t>(type) << 8) ^
                             static_cast<uint64_t>(op) ^ 0x9e3779b97f4a7c15ull;

  struct Piece {
    size_t index, offset, n;
    int buffer;
    Segments shards;
    uint8_t* mine;  // this rank's shard of the piece, in `out`
  };

  auto reduce_scatter_phase = [&](size_t index) {
    Piece p{index,
            index * piece,
            std::min(piece, count - index * piece),
            static_cast<int>((h.pieces_done + index) % kHierBufferSets),
            {},
            nullptr};
    std::memcpy(arena.area(p.buffer, l), input + p.offset * elem, p.n * elem);
    arena.barrier(ch.deadline(), ch.what() + " intra-node reduce-scatter", ch.aborted(), signature);
    p.shards = Segments::even(p.n, L);
    const size_t at = p.shards.offset[l] * elem, n = p.shards.count[l];
    p.mine = output + p.offset * elem + at;
    if (L == 1) {
      std::memcpy(p.mine, arena.area(p.buffer, 0), n * elem);
    } else {
      reduce::reduce(p.mine, arena.area(p.buffer, 0) + at, arena.area(p.buffer, 1) + at, n, type, partial);
      for (int k = 2; k < L; ++k) reduce::reduce(p.mine, p.mine, arena.area(p.buffer, k) + at, n, type, partial);
    }
    return p;
  };
  auto network_phase = [&](const Piece& p) {
    Channel rail = ch.subgroup(h.rail, h.node, static_cast<uint32_t>(p.index) * stride);
    inter_node_allreduce(rail, h, p.mine, p.shards.count[l], type, partial);
    if (op == ReduceOp::kAvg) reduce::divide(p.mine, p.shards.count[l], type, world);
  };
  auto allgather_phase = [&](const Piece& p) {
    const size_t at = p.shards.offset[l] * elem;
    std::memcpy(arena.area(p.buffer, l) + at, p.mine, p.shards.count[l] * elem);
    arena.barrier(ch.deadline(), ch.what() + " intra-node allgather", ch.aborted());
    for (int k = 0; k < L; ++k) {
      if (k == l) continue;
      size_t from = p.shards.offset[k] * elem;
      std::memcpy(output + p.offset * elem + from, arena.area(p.buffer, k) + from, p.shards.count[k] * elem);
    }
  };

  // Software pipeline: while piece p crosses the network on the helper thread, this thread runs the
  // reduce-scatter of piece p+1 and the allgather of piece p-1.
  const size_t pieces = (count + piece - 1) / piece;
  JoinOnExit join(*h.network);
  std::vector<Piece> ready;  // pieces whose network phase has started, oldest first
  for (size_t index = 0; index <= pieces; ++index) {
    if (index < pieces) ready.push_back(reduce_scatter_phase(index));
    if (h.network->busy()) h.network->wait();
    if (index < pieces) {
      const Piece& next = ready.back();
      h.network->start([&network_phase, next] { network_phase(next); });
    }
    if (ready.size() > (index < pieces ? 1u : 0u)) {
      allgather_phase(ready.front());
      ready.erase(ready.begin());
    }
  }
  h.pieces_done += pieces;
}

}  // namespace hiercoll::algo
