#pragma once
// Which of a provider's domains (NICs) a rank opens its endpoint on. Pure data in, data out, so every cluster shape
// is unit-tested on one machine; fabric_endpoint.cpp gathers the facts (libfabric's domains, the kernel's route,
// hwloc's locality) and applies the answer.
//
// The rule, in order:
//   1. HIERCOLL_FABRIC_IFACE, when set, is the pool: NCCL's NCCL_SOCKET_IFNAME syntax, a comma list of name
//      prefixes, "=name" for an exact name, a leading "^" to exclude the listed ones instead.
//   2. Otherwise, across nodes: every domain but loopback and the host-only bridges that container and VM runtimes
//      add (docker0, virbr0, ...), which carry the same address on every host and reach none of the others; of
//      those, one family (a name up to its first digit: ens5 -> ens*, hcnic0 -> hcnic*, rdmap16s27-rdm -> rdmap*),
//      as a NIC on the management network beside the data NICs is not a rail. The family is judged by its NICs
//      alone, so that every node of a job, alike, takes the same: device-backed first (a PCI NIC over a bridge or
//      dummy), then the most bandwidth (speeds summed), then the most NICs; only a tie goes to the family of the
//      interface that routes to the rendezvous host, then to name order. (By the route first, a host whose name maps
//      to 127.0.1.1, as Debian and Ubuntu write /etc/hosts, routed rank 0's node through loopback and left it
//      unnarrowed while the other nodes narrowed to the management NIC.) On one node: loopback, which always reaches
//      every rank.
//   3. Of the pool, the NICs near this rank's CPUs (hwloc), where any are known to be: its near set.
//   4. The rank's position: its place, in local-rank order, among the node's ranks with the same near set. Rank at
//      position p of k sharing n near NICs takes near[p % n] where n <= k, and near[j] for every j with j % k == p
//      where n > k (it stripes over n / k NICs). By position, not by local rank: under a cyclic placement (Slurm's
//      default across sockets) the even local ranks share one socket's NICs and the odd ones the other's, and
//      local_rank % n would leave half of each socket's NICs idle. The same placement on every node gives the same
//      mapping on every node, so local rank l of every node talks to its peers on the same rail of theirs
//      (rail-aligned, as NCCL_CROSS_NIC=0 and Open MPI's choice).
#include <cstdint>
#include <string>
#include <vector>

#include "topo/net.hpp"

namespace hiercoll::transport {

struct NicCandidate {
  std::string domain;  ///< libfabric's domain name: an interface name for tcp/udp/sockets, "rdmap16s27-rdm" for EFA
  bool loopback = false;
  bool physical = false;    ///< a device backs it (libfabric's PCI bus attributes, or the kernel's: topo::link_facts)
  uint64_t speed_mbps = 0;  ///< its link speed; 0: unknown
  /// Where the NIC sits relative to each local rank's CPUs, by local rank (a column of topo::nic_nearness); empty:
  /// unknown for every rank.
  std::vector<topo::Nearness> nearness;
};

struct NicRequest {
  std::string spec;     ///< HIERCOLL_FABRIC_IFACE; empty: the rule above
  std::string toward;   ///< the interface that routes to the rendezvous host (rule 2's last tie-break); "": unknown
  int local_rank = 0;   ///< this rank's place among its node's ranks
  int local_size = 1;   ///< the node's ranks
  bool across_nodes = true;
};

struct NicChoice {
  std::vector<std::string> near;     ///< the NICs this rank chose among (its near set), in order
  std::vector<std::string> domains;  ///< the ones it takes, in order: one, or its stripe (rule 4)
  std::string domain;                ///< domains.front(): the one whose address it publishes first
  std::string why;                   ///< one line for the log: the rule that decided
};

/// Throws InvalidUsageError naming the domains there are when the spec matches none, or when a job across nodes is
/// left with only loopback and host-only bridges.
NicChoice choose_nic(const std::vector<NicCandidate>& candidates, const NicRequest& request);

/// NCCL's interface-list match: `spec` as in NicRequest::spec, true when `name` is selected by it.
bool spec_selects(const std::string& spec, const std::string& name);

}  // namespace hiercoll::transport
