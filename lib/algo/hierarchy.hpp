#pragma once
// What the hierarchical algorithms need to know about the node structure, prepared once per communicator, and which
// form the hierarchical allreduce takes. The rounds through the node's peer memory are node_round.hpp's.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "algo/algorithms.hpp"
#include "algo/channel.hpp"
#include "algo/node_round.hpp"
#include "device/queue.hpp"
#include "hiercoll/types.hpp"
#include "transport/peer_memory.hpp"

namespace hiercoll::algo {

class BackgroundWorker;

/// Up to this size an allreduce on one node reads every local rank's whole input (one flag round) instead of
/// reduce-scattering and allgathering (two rounds): below it the rounds cost more than the extra reads.
inline constexpr size_t kOneShotBytes = 16 << 10;

/// What a schedule that issues queue work needs of its operation. Device work is issued on the caller's thread,
/// before the operation has a Channel (see network_stage.hpp), so the schedules take this instead.
struct OpContext {
  device::WaitContext limits;  ///< deadline, abort switch and the operation's name, for every wait it issues
  int world = 1;               ///< ranks in the communicator (kAvg divides by it)
  static OpContext of(Channel& ch) { return {{ch.deadline(), &ch.aborted(), ch.what()}, ch.size()}; }
  /// The limits of the step `phase` (a string literal: the context keeps the pointer).
  device::WaitContext wait(const char* phase) const {
    return {limits.deadline, limits.aborted, limits.what, phase};
  }
};

/// How the inter-node phase reduces each local rank's shard among the nodes (the ranks of one rail).
enum class InterNode {
  kRail,     ///< a ring over the rail, or recursive doubling up to Hierarchy::small_message_bytes
  kSharded,  ///< sharded reduction servers (allreduce_sharded.cpp): node j reduces part j of every node's shard
};

struct Hierarchy {
  std::vector<int> rail;  ///< world ranks with this rank's local rank, one per node, by node
  int node = 0;           ///< index of this rank in `rail`
  int local_rank = 0, local_size = 1;
  size_t small_message_bytes = 64 << 10;  ///< the inter-node phase uses recursive doubling up to this size
  /// One node, host memory: the allreduce writes a rank's shard to its output as it reduces it where the message is
  /// below `cached_output_bytes` and each rank's share of it (bytes / local ranks) at least `output_share_bytes`;
  /// otherwise into the rank's area alone, copied out afterwards (allreduce_hier). The engine sets the first to the
  /// last-level cache's size.
  size_t cached_output_bytes = SIZE_MAX;
  size_t output_share_bytes = 16 << 10;
  BackgroundWorker* network = nullptr;  ///< runs the inter-node phase beside the intra-node phases
};

/// Whether the hierarchical allreduce of `bytes` is one piece (or the rank is alone on its node): its network phase
/// has no other piece's work to overlap.
inline bool single_piece(const NodeMemory& m, size_t bytes) {
  return m.peers == nullptr || bytes <= m.peers->area_bytes();
}

/// The one flag round's name in errors ("<operation> intra-node exchange: local rank 2 never reached ...").
inline constexpr const char* kOneShotPhase = "intra-node exchange";

/// Whether the hierarchical allreduce touches peer memory only (one node, with local peers): it needs no channel and
/// no network stage, so any thread may run it.
inline bool node_only_allreduce(const Hierarchy& h, const NodeMemory& m) {
  return h.rail.size() <= 1 && m.peers != nullptr;
}

/// Up to this size an allreduce across nodes sends one message per node pair, from local rank 0, instead of one per
/// rail (allreduce_leader): below it a message's cost is its latency and its receiver's wake-up, not its bytes.
inline constexpr size_t kLeaderBytes = 16 << 10;

/// The forms the hierarchical allreduce takes (allreduce_hier.cpp).
enum class HierVariant {
  kNetworkOnly,  ///< alone on its node: the inter-node phase alone
  kOneShot,      ///< one node, small: one flag round, every rank reducing every input (allreduce_one_shot)
  kLeader,       ///< several nodes, small, host memory: local rank 0 alone crosses the network (allreduce_leader)
  kPipelined,    ///< the three phases, piece by piece
};
const char* to_string(HierVariant variant);

/// Which form the hierarchical allreduce of `bytes` takes: the one place it is decided, for the algorithm and for the
/// cost model that prices it (CostModel::hierarchical). `nodes`: ranks of this rank's rail; `local_size`: ranks of
/// its node; `staged`: the network phase works on a staged host copy (device memory); `area_bytes`: one area of the
/// node's peer memory (HIERCOLL_SHM_PIECE_BYTES).
constexpr HierVariant hier_variant(size_t nodes, int local_size, bool staged, size_t area_bytes, size_t bytes) {
  if (local_size <= 1) return HierVariant::kNetworkOnly;
  if (nodes <= 1) return bytes <= std::min(kOneShotBytes, area_bytes) ? HierVariant::kOneShot : HierVariant::kPipelined;
  return !staged && bytes > 0 && bytes <= std::min(kLeaderBytes, area_bytes) ? HierVariant::kLeader
                                                                             : HierVariant::kPipelined;
}
inline HierVariant hier_variant(const Hierarchy& h, const NodeMemory& m, size_t bytes) {
  if (m.peers == nullptr) return HierVariant::kNetworkOnly;
  return hier_variant(h.rail.size(), m.peers->local_size(), m.network_staging[0] != nullptr, m.peers->area_bytes(),
                      bytes);
}

/// Whether the hierarchical allreduce of `bytes` is one flag round in peer memory: it then uses no network endpoint
/// and no helper thread.
inline bool one_shot_allreduce(const Hierarchy& h, const NodeMemory& m, size_t bytes) {
  return hier_variant(h, m, bytes) == HierVariant::kOneShot;
}

}  // namespace hiercoll::algo
