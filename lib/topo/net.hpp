#pragma once
// This host's network interfaces as the NIC choice needs them: which exist, which one the kernel routes through to a
// given host, and which sit near this process's CPUs (hwloc's PCI locality).
#include <cstdint>
#include <string>
#include <vector>

namespace hiercoll::topo {

struct NetInterface {
  std::string name;  ///< e.g. "eth0", "lo"
  std::string ipv4;  ///< dotted quad, empty where the interface has none
  bool loopback = false;
};

/// The interfaces that are up, in the kernel's order, each once (its first IPv4 address).
std::vector<NetInterface> net_interfaces();

/// The IPv4 address of interface `name` (HIERCOLL_SOCKET_IFNAME's), for a rendezvous server's published address.
/// Throws InvalidUsageError naming the interface where it is not up or has no IPv4 address.
std::string interface_address(const std::string& name);

/// The interface the kernel would send from to reach `host` (a name or a numeric IPv4 address): what torch's gloo
/// and NCCL's bootstrap use to find an address that reaches the rendezvous. "" when the host does not resolve or no
/// route leads there.
std::string interface_toward(const std::string& host);

/// The interface holding the default route (/proc/net/route's first up 0.0.0.0/0 entry): where a multi-homed host's
/// traffic to other hosts leaves. "" where there is none.
std::string default_route_interface();

/// Host-only bridges and virtual links that container and VM runtimes make (docker0, br-1a2b, virbr0, veth..., cni0,
/// flannel.1, lxcbr0, podman0, ...): the same address on every host, never a way to another one.
bool host_only_interface(const std::string& name);

/// What the kernel says of a network interface's link: whether a device backs it (a PCI NIC, as against a bridge, a
/// veth or a dummy), and its speed in Mb/s (0 where the driver reports none, as bridges and dummies do). Read from
/// `sysfs` (/sys/class/net; another directory in tests).
struct LinkFacts {
  bool physical = false;
  uint64_t speed_mbps = 0;
};
LinkFacts link_facts(const std::string& name, const std::string& sysfs = "/sys/class/net");

/// The IPv4 address other hosts most likely reach this one at, for a rendezvous server published before any peer
/// is known: the default route's interface, else the first interface that is neither loopback nor host-only, else
/// 127.0.0.1.
std::string outward_address();

/// This process's network: its machine (host_identity) and network namespace ("host/boot-id/net:[4026531840]"). Ranks
/// with the same identity share their interfaces and addresses; ranks with different ones are on different hosts, or
/// in different namespaces of one (emulated nodes), and one address cannot belong to both.
std::string network_identity();

/// Where a NIC sits relative to the CPUs this process may run on.
enum class Nearness { kNear, kFar, kUnknown };

/// One NIC to place: a network interface name (hwloc lists PCI NICs' interfaces), or a PCI address
/// "dddd:bb:dd.f" (what libfabric reports for EFA and verbs devices), or both.
struct NicLocator {
  std::string netdev;
  std::string pci_bus_id;
};

/// For each CPU set of `cpu_shares` (one per local rank of this node, in local-rank order, each as cpus.hpp's
/// cpu_share() writes it) and each NIC: near when the NIC's PCI device's CPU set (the NUMA node or package it hangs
/// off) meets that rank's CPUs; unknown for virtual interfaces (veth, bridges, loopback), where hwloc sees no PCI
/// devices, and for a share that names no CPUs. Rows by local rank, columns by NIC. `cpu_shares` empty: one row, this
/// process's own binding. `topology_xml`: an hwloc XML file to read instead of this machine (the unit tests' p4d and
/// p5 nodes). Loads hwloc's topology with I/O devices: call once, at start-up.
std::vector<std::vector<Nearness>> nic_nearness(const std::vector<NicLocator>& nics,
                                                const std::vector<std::string>& cpu_shares = {},
                                                const std::string& topology_xml = "");

}  // namespace hiercoll::topo
