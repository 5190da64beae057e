#pragma once
// What the hierarchical algorithms need to know about the node structure, prepared once per communicator.
#include <vector>

#include "device/queue.hpp"
#include "transport/peer_memory.hpp"

namespace hiercoll::algo {

class BackgroundWorker;

/// Buffer sets (slots) the peer memory needs for the pipelined hierarchical allreduce (see allreduce_hier.cpp).
inline constexpr int kHierBufferSets = 3;

/// Where the intra-node phases run: the node's peer memory and the queue that moves data through it.
/// Shared memory with a HostQueue for host buffers; CUDA IPC with a CudaQueue for device buffers.
struct NodeMemory {
  transport::PeerMemory* peers = nullptr;  ///< null if alone on the node
  device::Queue* queue = nullptr;
  /// Host memory for the inter-node phase of each slot when the queue works on device memory (pinned, at least
  /// peers->area_bytes() / local_size + 64 bytes each); null for host queues, whose data the network reads in place.
  uint8_t* network_staging[kHierBufferSets] = {nullptr, nullptr, nullptr};
  /// Pieces run through `peers` so far, over all operations: it picks the slot and the flags' generation, and
  /// runs on across operations (a fast rank may start the next one while a slow one copies out this one).
  uint64_t pieces_done = 0;
};

struct Hierarchy {
  std::vector<int> rail;  ///< world ranks with this rank's local rank, one per node, by node
  int node = 0;           ///< index of this rank in `rail`
  int local_rank = 0, local_size = 1;
  size_t small_message_bytes = 64 << 10;  ///< the inter-node phase uses recursive doubling up to this size
  BackgroundWorker* network = nullptr;    ///< runs the inter-node phase beside the intra-node phases
};

}  // namespace hiercoll::algo
