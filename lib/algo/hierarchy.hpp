#pragma once
// What the hierarchical algorithms need to know about the node structure, prepared once per communicator.
#include <vector>

#include "transport/shm/node_arena.hpp"

namespace hiercoll::algo {

class BackgroundWorker;

/// Buffer sets the node arena needs for the pipelined hierarchical allreduce (see allreduce_hier.cpp).
inline constexpr int kHierBufferSets = 3;

struct Hierarchy {
  transport::NodeArena* arena = nullptr;  ///< this node's shared memory; null if alone on the node
  std::vector<int> rail;                  ///< world ranks with this rank's local rank, one per node, by node
  int node = 0;                           ///< index of this rank in `rail`
  int local_rank = 0, local_size = 1;
  size_t small_message_bytes = 64 << 10;  ///< the inter-node phase uses recursive doubling up to this size
  /// Pieces run through the arena so far, over all operations: it picks the buffer set, which must
  /// alternate across operations too (only the progress thread touches it).
  uint64_t pieces_done = 0;
  BackgroundWorker* network = nullptr;  ///< runs the inter-node phase beside the shared-memory phases
};

}  // namespace hiercoll::algo
