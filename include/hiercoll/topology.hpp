#pragma once
#include <string>
#include <vector>

#include "hiercoll/export.hpp"

namespace hiercoll {

/// Which ranks share a node. Nodes are numbered by their lowest rank; ranks inside a node by rank.
struct HIERCOLL_API Layout {
  int rank = 0, size = 1;
  int node_count = 1;
  int node = 0;        ///< this rank's node
  int local_rank = 0;  ///< position among the ranks of this node
  int local_size = 1;
  std::vector<int> node_of;                  ///< node of every rank
  std::vector<int> local_rank_of;            ///< local rank of every rank
  std::vector<std::vector<int>> node_ranks;  ///< ranks of every node, ascending

  /// Every node has the same number of ranks (the hierarchical algorithms need this).
  bool regular() const;
  /// Rank with local rank `local` on node `node_index`.
  int rank_at(int node_index, int local) const { return node_ranks[node_index][local]; }
  /// "2 nodes x 2 ranks: node0=[0,1] node1=[2,3]".
  std::string describe() const;

  /// Builds the layout from every rank's node identity (a host name, or HIERCOLL_NODE_ID).
  static Layout from_node_ids(const std::vector<std::string>& node_ids, int rank);
};

/// What hwloc sees on this machine.
struct HIERCOLL_API MachineInfo {
  int cores = 0, hardware_threads = 0, numa_nodes = 0;
  std::vector<std::string> gpus;  ///< e.g. "cuda0 (PCI 0000:1b:00.0, NUMA 0)"
  std::vector<std::string> nics;  ///< network and OpenFabrics devices, e.g. "eth0", "rdmap16s27 (EFA)"
  std::string describe() const;
};

/// Discovers cores, NUMA nodes, GPUs and NICs with hwloc.
HIERCOLL_API MachineInfo detect_machine();

}  // namespace hiercoll
