#pragma once
// Every collective algorithm, each in its own file; counts are elements of `type`. Two families:
//  - flat ones, written against Channel, on host memory (device buffers reach them as staged host copies:
//    gpu/device_path.hpp); each blocks the calling (progress) thread until done;
//  - node ones (allreduce_hier and its variants, the *_node collectives), written against NodeMemory, on the memory
//    its queue works on, host or device: they issue the queue's work, bounded by an OpContext's deadline and abort
//    flag, and hand any network phase to a NetworkStage.
#include <cstddef>
#include <cstring>

#include "algo/channel.hpp"
#include "device/queue.hpp"
#include "hiercoll/types.hpp"

namespace hiercoll::algo {

/// Ring: pipelined reduce-scatter then allgather; bandwidth-optimal, 2(n-1) latency steps.
void allreduce_ring(Channel& ch, const void* in, void* out, size_t count, DataType type, ReduceOp op);
/// Sharded reduction servers (SageMaker's data-parallel scheme): rank j reduces part j of everyone's buffer and
/// returns it; 2 steps of n-1 concurrent messages each, 2(n-1)/n of the buffer sent per rank.
void allreduce_sharded(Channel& ch, const void* in, void* out, size_t count, DataType type, ReduceOp op);
/// Recursive doubling (with folding for non-powers of two): log2(n) steps, for small messages.
void allreduce_recursive_doubling(Channel& ch, const void* in, void* out, size_t count, DataType type, ReduceOp op);
struct Hierarchy;
enum class InterNode;
struct NodeMemory;
struct OpContext;
class NetworkStage;
/// Hierarchical: intra-node reduce-scatter (through the node's peer memory), inter-node allreduce per local
/// rank, intra-node allgather. Requires every node to have the same number of ranks. `in` and `out` are the
/// kind of memory `memory.queue` works on (host, or device). Issues the operation's queue work and hands the
/// inter-node phase to `network` (see network_stage.hpp): the result is in `out` once the queue's work ran.
/// `inter` picks the inter-node algorithm (a ring per rail, or sharded reduction servers).
void allreduce_hier(const OpContext& issue, Hierarchy& h, NodeMemory& memory, NetworkStage& network, const void* in,
                    void* out, size_t count, DataType type, ReduceOp op, InterNode inter);
/// allreduce_hier on one node when one_shot_allreduce(): every local rank stages its input in peer memory, one
/// flag round, then each reduces all L inputs itself. Needs no Channel (no network, no tags), so it may run on the
/// caller's thread; `wait` bounds the flag round. `world` divides for kAvg.
void allreduce_one_shot(NodeMemory& memory, const device::WaitContext& wait, const void* in, void* out, size_t count,
                        DataType type, ReduceOp op, int world);
/// Reduce-scatter and allgather when the whole group is one node: every rank reads the others' parts from the
/// node's peer memory. Same contracts as the ring versions; queue work only, issued like allreduce_hier's.
void reduce_scatter_node(const OpContext& issue, NodeMemory& memory, const void* in, void* out, size_t recv_count,
                         DataType type, ReduceOp op);
void allgather_node(const OpContext& issue, NodeMemory& memory, const void* in, void* out, size_t send_count,
                    DataType type);
/// Broadcast of `bytes` from local rank `root` when the whole group is one node: the root stages its data in its
/// area, round by round, and the others copy it out (a few bytes ride in the root's flag).
void broadcast_node(const OpContext& issue, NodeMemory& memory, const void* in, void* out, size_t bytes, int root);
void reduce_scatter_ring(Channel& ch, const void* in, void* out, size_t recv_count, DataType type, ReduceOp op);
void allgather_ring(Channel& ch, const void* in, void* out, size_t send_count, DataType type);
/// Pipelined chain from the root.
void broadcast_chain(Channel& ch, const void* in, void* out, size_t bytes, int root);
/// Pipelined chain towards the root.
void reduce_chain(Channel& ch, const void* in, void* out, size_t count, DataType type, ReduceOp op, int root);
void alltoall_pairwise(Channel& ch, const void* in, void* out, size_t bytes_per_rank);
void barrier_dissemination(Channel& ch);
/// Barrier when the whole group is one node: one round of the node's flags, no network.
void barrier_node(const OpContext& issue, NodeMemory& memory);

/// memcpy that accepts empty and identical ranges (memcpy itself does not, even for 0 bytes of null).
inline void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes != 0 && dst != src) std::memcpy(dst, src, bytes);
}

// Building blocks shared by the ring algorithms (ring.cpp).

/// Element ranges of the n segments a buffer is cut into.
struct Segments {
  std::vector<size_t> offset, count;            // in elements
  static Segments even(size_t total, int n);    ///< near-equal parts (the first total % n get one more)
  static Segments blocks(size_t block, int n);  ///< n parts of `block` elements
  /// Near-equal parts that start at multiples of `multiple` elements (vector loads stay aligned).
  static Segments aligned(size_t total, int n, size_t multiple);
};

/// How allreduce_sharded cuts `count` elements among `n` ranks: part p of the buffer goes to rank p, in chunks of
/// `chunk` elements (the largest part in `chunks` of them); it uses steps 0 .. 2 chunks - 1 of its Channel.
struct ShardedChunks {
  Segments parts;
  size_t chunk = 1, chunks = 0;
  static ShardedChunks of(size_t count, int n, size_t elem, const AlgoConfig& config);
};

/// The ring allreduce's first phase, also the ring reduce-scatter's body (reduce_scatter_ring): afterwards segment
/// ch.rank() of the reduction is in `own_out`. Other segments' partial sums go to `work` (same layout as `in`; may
/// be `in` itself). Sends read `in` and `work` only.
void ring_phase_reduce_scatter(Channel& ch, const void* in, void* work, void* own_out, const Segments& segments,
                               DataType type, ReduceOp op);
/// The ring allreduce's second phase, also the ring allgather's body (allgather_ring): `out` holds segment ch.rank()
/// on entry and every segment on return.
void ring_phase_allgather(Channel& ch, void* out, const Segments& segments, size_t elem_size);

}  // namespace hiercoll::algo
