// The NIC choice (transport/fabric/nic_choice.hpp) on made-up hosts: which domain each local rank of a node opens.
#include <catch2/catch.hpp>
#include <cstdio>

#include <set>

#include "hiercoll/errors.hpp"
#include "topo/net.hpp"
#include "transport/fabric/nic_choice.hpp"

using hiercoll::InvalidUsageError;
using hiercoll::topo::Nearness;
using hiercoll::transport::choose_nic;
using hiercoll::transport::NicCandidate;
using hiercoll::transport::NicRequest;
using hiercoll::transport::spec_selects;

namespace {

std::vector<NicCandidate> host(std::initializer_list<const char*> names) {
  std::vector<NicCandidate> list;
  for (const char* name : names) list.push_back({name, std::string(name) == "lo", Nearness::kUnknown});
  return list;
}

std::string nic_of(const std::vector<NicCandidate>& candidates, int local_rank, const std::string& toward = "",
                   const std::string& spec = "", bool across_nodes = true) {
  NicRequest request;
  request.local_rank = local_rank;
  request.toward = toward;
  request.spec = spec;
  request.across_nodes = across_nodes;
  return choose_nic(candidates, request).domain;
}

}  // namespace

TEST_CASE("the interface list follows NCCL_SOCKET_IFNAME's syntax", "[nic]") {
  CHECK(spec_selects("eth", "eth0"));
  CHECK(spec_selects("eth", "eth12"));
  CHECK_FALSE(spec_selects("eth", "ens5"));
  CHECK(spec_selects("ens,eth", "ens5"));
  CHECK(spec_selects("=eth1", "eth1"));
  CHECK_FALSE(spec_selects("=eth1", "eth12"));
  CHECK(spec_selects("^docker,lo", "eth0"));
  CHECK_FALSE(spec_selects("^docker,lo", "docker0"));
  CHECK_FALSE(spec_selects("^=lo", "lo"));
  CHECK(spec_selects("^=lo", "lonely0"));
}

TEST_CASE("local rank l takes rail l on every node, in natural order whatever the provider's", "[nic]") {
  // Two nodes whose provider lists the same NICs in different orders.
  const auto a = host({"lo", "hcnic1", "hcnic0", "hcnic10", "hcnic2"});
  const auto b = host({"hcnic2", "hcnic10", "lo", "hcnic0", "hcnic1"});
  const std::vector<std::string> rails = {"hcnic0", "hcnic1", "hcnic2", "hcnic10"};
  for (int local = 0; local < 8; ++local) {
    CHECK(nic_of(a, local) == rails[static_cast<size_t>(local % 4)]);
    CHECK(nic_of(b, local) == nic_of(a, local));
  }
}

TEST_CASE("across nodes, loopback and host-only bridges are never chosen; on one node loopback is", "[nic]") {
  const auto decoyed = host({"lo", "docker0", "virbr0", "br-5f1e", "veth12ab", "eth0"});
  std::set<std::string> chosen;
  for (int local = 0; local < 8; ++local) chosen.insert(nic_of(decoyed, local));
  CHECK(chosen == std::set<std::string>{"eth0"});
  CHECK(nic_of(decoyed, 3, "", "", /*across_nodes=*/false) == "lo");
  // Only loopback and bridges across nodes: an error naming the knob, not a hang later.
  CHECK_THROWS_AS(nic_of(host({"lo", "docker0"}), 0), InvalidUsageError);
  CHECK_THROWS_WITH(nic_of(host({"lo", "docker0"}), 0), Catch::Contains("HIERCOLL_FABRIC_IFACE"));
}

TEST_CASE("the interface that routes to the rendezvous host narrows the pool to its family", "[nic]") {
  // A decoy listed first (same address on every host, not caught by name) and a management NIC beside the rails.
  const auto node = host({"lo", "dock0", "mgmt0", "hcnic0", "hcnic1"});
  CHECK(nic_of(node, 0, "hcnic0") == "hcnic0");
  CHECK(nic_of(node, 1, "hcnic0") == "hcnic1");
  CHECK(nic_of(node, 2, "hcnic0") == "hcnic0");
  // Without the route, the decoy is a candidate: start-up's duplicate-address check is what stops it then.
  std::set<std::string> unrouted;
  for (int local = 0; local < 4; ++local) unrouted.insert(nic_of(node, local));
  CHECK(unrouted.count("dock0") == 1);
  // A route through an interface that is not a candidate (loopback, a bridge) narrows nothing.
  CHECK(nic_of(node, 1, "lo") == nic_of(node, 1));
}

TEST_CASE("NICs near the rank's CPUs come first where hwloc places them", "[nic]") {
  // Four NICs, two per socket; a rank bound to socket 1 sees NICs 2 and 3 near.
  auto node = host({"rdmap0", "rdmap1", "rdmap2", "rdmap3"});
  for (size_t i = 0; i < node.size(); ++i) node[i].nearness = i < 2 ? Nearness::kFar : Nearness::kNear;
  CHECK(nic_of(node, 0) == "rdmap2");
  CHECK(nic_of(node, 1) == "rdmap3");
  CHECK(nic_of(node, 2) == "rdmap2");
  // Nothing known near (virtual NICs): every NIC is a rail.
  for (auto& c : node) c.nearness = Nearness::kUnknown;
  CHECK(nic_of(node, 3) == "rdmap3");
}

TEST_CASE("an explicit list wins, and one that selects nothing names what there is", "[nic]") {
  const auto node = host({"lo", "eth0", "eth1", "ib0"});
  CHECK(nic_of(node, 0, "", "lo") == "lo");  // loopback across emulated nodes on one host, when asked
  CHECK(nic_of(node, 1, "", "eth") == "eth1");
  CHECK(nic_of(node, 1, "", "^eth,lo") == "ib0");
  CHECK_THROWS_WITH(nic_of(node, 0, "", "hcnic"), Catch::Contains("eth0") && Catch::Contains("hcnic"));
}

TEST_CASE("the route to a host: loopback for 127/8, an interface of this host for its own address", "[nic]") {
  CHECK(hiercoll::topo::interface_toward("127.0.0.1") == "lo");
  for (const auto& i : hiercoll::topo::net_interfaces()) {
    if (!i.ipv4.empty()) CHECK(hiercoll::topo::interface_toward(i.ipv4) == i.name);
  }
  CHECK(hiercoll::topo::interface_toward("") == "");
  CHECK(hiercoll::topo::interface_toward("no-such-host.invalid") == "");
}

// The address a rendezvous server is published at before any peer is known: the default route's interface, as
// iproute2 names it, never loopback or a docker-style bridge.
TEST_CASE("the outward address is the default route's interface's, never loopback or a host-only bridge", "[nic]") {
  std::string routed;  // iproute2's answer: "default via 10.0.0.1 dev eth0 ..."
  if (std::FILE* out = popen("ip -4 route show default 2>/dev/null", "r")) {
    char line[512];
    if (std::fgets(line, sizeof line, out) != nullptr) {
      const std::string text = line;
      const auto dev = text.find(" dev ");
      if (dev != std::string::npos) routed = text.substr(dev + 5, text.find_first_of(" \n", dev + 5) - dev - 5);
    }
    pclose(out);
  }
  CHECK(hiercoll::topo::default_route_interface() == routed);
  const std::string address = hiercoll::topo::outward_address();
  std::string owner;
  for (const auto& i : hiercoll::topo::net_interfaces()) {
    if (i.ipv4 == address && owner.empty()) owner = i.name;
  }
  INFO("outward address " << address << " on " << owner << ", default route via " << routed);
  if (!routed.empty() && !hiercoll::topo::host_only_interface(routed)) {
    CHECK(owner == routed);
  } else if (address != "127.0.0.1") {
    CHECK_FALSE(hiercoll::topo::host_only_interface(owner));
    CHECK(owner != "lo");
  }
  CHECK(hiercoll::topo::host_only_interface("docker0"));
  CHECK(hiercoll::topo::host_only_interface("br-1a2b3c"));
  CHECK_FALSE(hiercoll::topo::host_only_interface("eth0"));
  CHECK_FALSE(hiercoll::topo::host_only_interface("hcnic0"));
}
