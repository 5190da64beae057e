// Hierarchical allreduce for N nodes x L ranks, in pieces of the node arena's area size:
//   (1) intra-node reduce-scatter: each rank copies its piece into its shared-memory area, and after a
//       node barrier reduces shard `local_rank` of the piece over all L areas (in local-rank order);
//   (2) inter-node allreduce of that shard among the ranks with the same local rank (one ring per local
//       rank, so all L ranks and the node's NICs work in parallel, each on 1/L of the data);
//   (3) intra-node allgather: each rank publishes its finished shard in its area and, after a second
//       barrier, copies the other L-1 shards out.
// Pieces alternate between two buffer sets, so a rank may start piece p+1 while others still copy out
// piece p; the second barrier of piece p+1 guarantees nobody still reads piece p's set when p+2 reuses it.
// The alternation runs across operations (Hierarchy::pieces_done), since a fast rank may begin the next
// allreduce while a slow one still copies out the last piece of this one.
#include <algorithm>
#include <cstring>

#include "algo/algorithms.hpp"
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

void allreduce_hier(Channel& ch, Hierarchy& h, const void* in, void* out, size_t count, DataType type,
                    ReduceOp op) {
  const size_t elem = dtype_size(type);
  const int world = ch.size();
  const ReduceOp partial = op == ReduceOp::kAvg ? ReduceOp::kSum : op;  // divide once, at the very end
  if (h.arena == nullptr) {  // alone on the node: only the inter-node phase
    Channel rail = ch.subgroup(h.rail, h.node, 0);
    if (in != out) std::memcpy(out, in, count * elem);
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

  size_t index = 0;
  for (size_t offset = 0; offset < count; offset += piece, ++index) {
    const size_t n = std::min(piece, count - offset);
    const int buffer = static_cast<int>(h.pieces_done++ % 2);
    std::memcpy(arena.area(buffer, l), input + offset * elem, n * elem);
    arena.barrier(ch.deadline(), ch.what() + " intra-node reduce-scatter", ch.aborted());

    Segments shards = Segments::even(n, L);
    const size_t shard_bytes = shards.offset[l] * elem;
    uint8_t* mine = output + offset * elem + shard_bytes;
    if (L == 1) {
      std::memcpy(mine, arena.area(buffer, 0), shards.count[l] * elem);
    } else {
      reduce::reduce(mine, arena.area(buffer, 0) + shard_bytes, arena.area(buffer, 1) + shard_bytes, shards.count[l],
                     type, partial);
      for (int k = 2; k < L; ++k) {
        reduce::reduce(mine, mine, arena.area(buffer, k) + shard_bytes, shards.count[l], type, partial);
      }
    }

    Channel rail = ch.subgroup(h.rail, h.node, static_cast<uint32_t>(index) * stride);
    inter_node_allreduce(rail, h, mine, shards.count[l], type, partial);
    if (op == ReduceOp::kAvg) reduce::divide(mine, shards.count[l], type, world);

    std::memcpy(arena.area(buffer, l) + shard_bytes, mine, shards.count[l] * elem);
    arena.barrier(ch.deadline(), ch.what() + " intra-node allgather", ch.aborted());
    for (int k = 0; k < L; ++k) {
      if (k == l) continue;
      size_t at = shards.offset[k] * elem;
      std::memcpy(output + offset * elem + at, arena.area(buffer, k) + at, shards.count[k] * elem);
    }
  }
}

}  // namespace hiercoll::algo
