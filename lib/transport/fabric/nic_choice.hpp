#pragma once
// Which of a provider's domains (NICs) a rank opens its endpoint on. Pure data in, data out, so every cluster shape
// is unit-tested on one machine; fabric_endpoint.cpp gathers the facts (libfabric's domains, the kernel's route,
// hwloc's locality) and applies the answer.
//
// The rule, in order:
//   1. HIERCOLL_FABRIC_IFACE, when set, is the pool: NCCL's NCCL_SOCKET_IFNAME syntax, a comma list of name
//      prefixes, "=name" for an exact name, a leading "^" to exclude the listed ones instead.
//   2. Otherwise, across nodes: every domain but loopback and the host-only bridges that container and VM runtimes
//      add (docker0, virbr0, ...), which carry the same address on every host and reach none of the others. Where
//      the interface that routes to the rendezvous host is known and is one of them, only the NICs of its family
//      (its name without the trailing number: ens5 -> ens*, hcnic0 -> hcnic*): a NIC on the management network
//      beside the data NICs is not a rail. On one node: loopback, which always reaches every rank.
//   3. Of the pool, the NICs near this process's CPUs (hwloc), where any are known to be.
//   4. Rank l of a node takes near[l % near.size()]: the same mapping on every node, so local rank l of every node
//      talks to its peers on NIC l of theirs (rail-aligned, as NCCL_CROSS_NIC=0 and Open MPI's choice).
#include <string>
#include <vector>

#include "topo/net.hpp"

namespace hiercoll::transport {

struct NicCandidate {
  std::string domain;  ///< libfabric's domain name: an interface name for tcp/udp/sockets, "rdmap16s27-rdm" for EFA
  bool loopback = false;
  topo::Nearness nearness = topo::Nearness::kUnknown;
};

struct NicRequest {
  std::string spec;     ///< HIERCOLL_FABRIC_IFACE; empty: the rule above
  std::string toward;   ///< the interface that routes to the rendezvous host; empty: unknown
  int local_rank = 0;   ///< this rank's place among its node's ranks
  bool across_nodes = true;
};

struct NicChoice {
  std::vector<std::string> pool;  ///< the NICs this rank chose among (its rails), in order
  std::string domain;             ///< the one it takes
  std::string why;                ///< one line for the log: the rule that decided
};

/// Throws InvalidUsageError naming the domains there are when the spec matches none, or when a job across nodes is
/// left with only loopback and host-only bridges.
NicChoice choose_nic(const std::vector<NicCandidate>& candidates, const NicRequest& request);

/// NCCL's interface-list match: `spec` as in NicRequest::spec, true when `name` is selected by it.
bool spec_selects(const std::string& spec, const std::string& name);

}  // namespace hiercoll::transport
