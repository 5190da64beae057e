#pragma once
// The node's peer memory and the protocol every node schedule speaks through it (allreduce_hier, allreduce_one_shot,
// the node collectives): rounds of three rotating slots, each with its flags, signalled with a signature the waiting
// ranks compare, and the reduce and gather halves of a round.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "algo/algorithms.hpp"
#include "device/queue.hpp"
#include "hiercoll/types.hpp"
#include "transport/peer_memory.hpp"

namespace hiercoll::algo {

/// Buffer sets (slots) the peer memory needs for the pipelined hierarchical allreduce (see allreduce_hier.cpp).
inline constexpr int kHierBufferSets = 3;

/// Where the intra-node phases run: the node's peer memory and the queue that moves data through it.
/// Shared memory with a HostQueue for host buffers; CUDA IPC with a CudaQueue for device buffers.
/// One network staging buffer (NodeMemory::network_staging): the inter-node phase of a slot works on one local rank's
/// shard of a piece, area / L rounded up to whole cache lines, so a line at each end beyond area / L.
inline size_t network_staging_bytes(size_t area_bytes, int local_size) {
  return area_bytes / static_cast<size_t>(local_size) + 128;
}

struct NodeMemory {
  transport::PeerMemory* peers = nullptr;  ///< null if alone on the node
  device::Queue* queue = nullptr;
  /// Host memory for the inter-node phase of each slot when the queue works on device memory (pinned, at least
  /// network_staging_bytes() each); null for host queues, whose data the network reads in place (unless
  /// HIERCOLL_NET_STAGING asks for buffers of ours).
  uint8_t* network_staging[kHierBufferSets] = {nullptr, nullptr, nullptr};
  /// Pieces run through `peers` so far, over all operations: it picks the slot and the flags' generation, and
  /// runs on across operations (a fast rank may start the next one while a slow one copies out this one).
  uint64_t pieces_done = 0;
  /// Broadcasts through the peers' rings so far (broadcast_node): every local rank counts each one, so the count
  /// names the ring entry and its generation. `ring_all_read`: the fewest entries any local rank had finished
  /// reading when this rank last looked (as a root, it looks again only when that is too few).
  uint64_t ring_broadcasts = 0, ring_all_read = 0;
  /// Node allgathers and broadcasts of at least this many bytes per rank read the peers' buffers directly
  /// (PeerMemory::direct_read) where the peer memory offers it; 0: never. Turned off for good (on every local rank
  /// alike) the first time any local rank's read is refused.
  uint64_t direct_bytes = 0;
  /// Whether rounds of host memory move on through their areas (node_round): where each local rank has a core of
  /// its own. Where ranks share cores, the peer whose copy a store waits for is often on the same core, and the
  /// rotation only adds its footprint (measured slower there: docs/experiments.md, "Rotating within the areas").
  bool rotate = false;
  /// Scratch of the schedules, one entry per local rank, kept so that small operations allocate nothing.
  std::vector<uint64_t*> flags;
  std::vector<const void*> sources;
};

/// What local ranks compare at every staged-flag wait: peer memory has no message sizes, so a count, type or
/// op mismatch inside the node would otherwise mix data silently. `kind` tells the collectives apart.
inline uint64_t node_signature(uint64_t kind, size_t count, DataType type, ReduceOp op) {
  return (static_cast<uint64_t>(count) << 20) ^ (kind << 16) ^ (static_cast<uint64_t>(type) << 8) ^
         static_cast<uint64_t>(op) ^ 0x9e3779b97f4a7c15ull;
}

/// Signals this rank's `kind` flag of `slot` at `generation` (with `signature`, 0: none), then holds back later
/// work on the queue until every local rank's has reached it. `flags` is scratch, one entry per local rank.
/// `meanwhile` runs between the signal and the wait: work of this rank's own that its peers do not wait for.
template <class Meanwhile = void (*)()>
inline void node_sync(
    NodeMemory& m, transport::FlagKind kind, int slot, uint64_t generation, uint64_t signature,
    const device::WaitContext& wait, std::vector<uint64_t*>& flags, Meanwhile meanwhile = [] {}) {
  const int L = m.peers->local_size();
  flags.resize(static_cast<size_t>(L));
  for (int k = 0; k < L; ++k) flags[k] = m.peers->flag(kind, slot, k);
  m.queue->signal(m.peers->flag(kind, slot, m.peers->local_rank()), generation, signature);
  meanwhile();
  m.queue->wait(flags.data(), L, generation, signature, wait);
}

/// Round `t` of an operation through peer memory, counted on from NodeMemory::pieces_done: the slot it uses, the
/// generation its flags carry, and where in each rank's area of the slot its parts start. Every node schedule
/// (allreduce_hier, allreduce_one_shot, the node collectives) walks the same rotation, so a rank overwrites slot s in
/// round t+3 only after the wait of round t+2, which every local rank signals only after its reads of round t+1:
/// whichever schedules those rounds belong to.
///
/// `bytes`: how much of each area the round uses (0: say nothing, offset 0). In host memory, where NodeMemory::rotate
/// says, a round that uses at least kRotateFromBytes and at most half an area starts further on each time its slot
/// comes round, wrapping, so that a rank writes the same lines again only after every position of its slot: a store
/// into lines a peer has just read waits for that peer's copy to be invalidated, which made the copies of mid-size
/// calls cost more than the data they move, and lines the peer read that long ago have left its caches
/// (docs/experiments.md, "Rotating within the areas"). Below kRotateFromBytes a round moves a few lines, and a fresh
/// page each time costs more (its TLB entry, lines from memory) than the invalidations it saves. Every rank computes
/// the same offset from the generation, `bytes` (which the round's signature check makes agree) and `rotate` (which
/// every local rank derives from the same gathered figures).
inline constexpr size_t kRotateFromBytes = 16 << 10;
struct NodeRound {
  int slot;
  uint64_t generation;
  size_t offset = 0;  ///< bytes: where this round's part starts in every rank's area of the slot
};
inline NodeRound node_round(const NodeMemory& m, size_t t, size_t bytes = 0) {
  NodeRound r{static_cast<int>((m.pieces_done + t) % kHierBufferSets), m.pieces_done + t + 1};
  if (!m.rotate || bytes < kRotateFromBytes || m.queue->kind() != device::MemoryKind::kHost) return r;
  const size_t stride = (bytes + 4095) / 4096 * 4096;
  const size_t positions = m.peers->area_bytes() / stride;
  if (positions > 1) r.offset = (m.pieces_done + t) / kHierBufferSets % positions * stride;
  return r;
}

/// Rank k's part of round `r` in peer memory.
inline uint8_t* round_area(const transport::PeerMemory& peers, NodeRound r, int k) {
  return peers.area(r.slot, k) + r.offset;
}

/// A round through the flags' own lines, for data of at most peers->flag_payload_bytes(): stages `bytes` of `in`
/// in this rank's staged flag line of round `r`, then node_sync (with `signature`). Rank k's data is then at
/// peers->flag_payload(kFlagStaged, r.slot, k): the line a peer's wait pulls over brings the data with it, one
/// cache-line transfer per peer instead of two.
inline void node_flag_round(NodeMemory& m, NodeRound r, uint64_t signature, const device::WaitContext& wait,
                            const void* in, size_t bytes) {
  m.queue->copy(m.peers->flag_payload(transport::kFlagStaged, r.slot, m.peers->local_rank()), in, bytes);
  node_sync(m, transport::kFlagStaged, r.slot, r.generation, signature, wait, m.flags);
}

/// The reduce half of a node reduce-scatter round. This rank has staged its part of round `r` in its area; signals
/// that (with `signature`), waits for every local rank's, then reduces elements [at, at + n) of all L areas into
/// `out`, in local-rank order so every rank's result has the same bits. `own`: this rank's source for those
/// elements when it did not stage them (null: its area). `mine`, when not null, receives the result too, in the
/// same pass (`out` is then what the other local ranks read).
void node_reduce_round(NodeMemory& m, NodeRound r, uint64_t signature, const device::WaitContext& wait, size_t at,
                       size_t n, const void* own, void* out, DataType type, ReduceOp op, void* mine = nullptr);

/// The gather half of a node allgather round. This rank has put its part of round `r` in its area; signals `kind`
/// (with `signature`, 0: none), waits for every local rank's, then copies rank k's part (parts.count[k] elements at
/// parts.offset[k] of its area) to `to + k * stride + parts.offset[k]` (elements), for every other local rank k
/// (this rank's part is its caller's to place: `meanwhile` may do it, between this rank's signal and its wait).
template <class Meanwhile = void (*)()>
void node_gather_round(
    NodeMemory& m, NodeRound r, transport::FlagKind kind, uint64_t signature, const device::WaitContext& wait,
    const Segments& parts, uint8_t* to, size_t stride, DataType type, Meanwhile meanwhile = [] {}) {
  transport::PeerMemory& peers = *m.peers;
  const size_t elem = dtype_size(type);
  node_sync(m, kind, r.slot, r.generation, signature, wait, m.flags, meanwhile);
  for (int k = 0; k < peers.local_size(); ++k) {
    if (k == peers.local_rank()) continue;
    const size_t at = parts.offset[k] * elem;
    m.queue->copy(to + static_cast<size_t>(k) * stride * elem + at, round_area(peers, r, k) + at,
                  parts.count[k] * elem);
  }
}

}  // namespace hiercoll::algo
