// The NIC choice (transport/fabric/nic_choice.hpp) on made-up hosts: which domain each local rank of a node opens.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <tuple>

#include "hiercoll/errors.hpp"
#include "topo/cpus.hpp"
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
  for (const char* name : names) {
    NicCandidate c;
    c.domain = name;
    c.loopback = std::string(name) == "lo";
    list.push_back(c);
  }
  return list;
}

std::string nic_of(const std::vector<NicCandidate>& candidates, int local_rank, const std::string& toward = "",
                   const std::string& spec = "", bool across_nodes = true) {
  NicRequest request;
  request.local_rank = local_rank;
  request.local_size = 8;
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

TEST_CASE("across nodes the pool is one family of NICs, judged by the NICs alone, the same on every node", "[nic]") {
  // A decoy listed first (same address on every host, not caught by name) and a management NIC beside the rails.
  const auto node = host({"lo", "dock0", "mgmt0", "hcnic0", "hcnic1"});
  CHECK(nic_of(node, 0) == "hcnic0");
  CHECK(nic_of(node, 1) == "hcnic1");
  CHECK(nic_of(node, 2) == "hcnic0");
  // The route to the rendezvous host changes nothing: rank 0's node, whose host name maps to 127.0.1.1 (Debian,
  // Ubuntu), routes through loopback; the others through the management NIC. Every node takes the rails.
  for (const char* toward : {"lo", "mgmt0", "hcnic1", ""}) {
    for (int local = 0; local < 4; ++local) CHECK(nic_of(node, local, toward) == nic_of(node, local));
  }
  // Device-backed NICs over virtual ones, then bandwidth over count: two 1 Gb/s management ports beside one
  // 100 Gb/s data NIC; a veth family of four beside a PCI NIC.
  auto with = [](std::vector<NicCandidate> list, const std::map<std::string, std::pair<bool, uint64_t>>& facts) {
    for (auto& c : list) {
      auto it = facts.find(c.domain);
      if (it != facts.end()) std::tie(c.physical, c.speed_mbps) = it->second;
    }
    return list;
  };
  const auto ports = with(host({"lo", "eno1", "eno2", "ens1f0"}),
                          {{"eno1", {true, 1000}}, {"eno2", {true, 1000}}, {"ens1f0", {true, 100000}}});
  for (int local = 0; local < 4; ++local) CHECK(nic_of(ports, local, "eno1") == "ens1f0");
  const auto veths = with(host({"vnic0", "vnic1", "vnic2", "vnic3", "eth0"}),
                          {{"vnic0", {false, 10000}}, {"vnic1", {false, 10000}}, {"vnic2", {false, 10000}},
                           {"vnic3", {false, 10000}}, {"eth0", {true, 0}}});
  CHECK(nic_of(veths, 3) == "eth0");
  // Nothing known: the most NICs; a tie goes to the routed family, then to name order.
  CHECK(nic_of(host({"eth0", "eth1", "ib0"}), 1, "ib0") == "eth1");
  CHECK(nic_of(host({"eth0", "ens5"}), 0, "eth0") == "eth0");
  CHECK(nic_of(host({"eth0", "ens5"}), 0, "lo") == "ens5");
}

TEST_CASE("NICs near the rank's CPUs come first where hwloc places them", "[nic]") {
  // Four NICs, two per socket; local ranks 0-1 bound to socket 0, 2-3 to socket 1.
  auto node = host({"rdmap0", "rdmap1", "rdmap2", "rdmap3"});
  for (size_t i = 0; i < node.size(); ++i) {
    for (int local = 0; local < 4; ++local)
      node[i].nearness.push_back((i < 2) == (local < 2) ? Nearness::kNear : Nearness::kFar);
  }
  auto nic = [&node](int local) {
    NicRequest request;
    request.local_rank = local;
    request.local_size = 4;
    return choose_nic(node, request);
  };
  CHECK(nic(0).domain == "rdmap0");
  CHECK(nic(1).domain == "rdmap1");
  CHECK(nic(2).domain == "rdmap2");
  CHECK(nic(3).domain == "rdmap3");
  CHECK(nic(3).near == std::vector<std::string>{"rdmap2", "rdmap3"});
  // Nothing known near (virtual NICs): every NIC is a rail, and local rank l takes NIC l.
  for (auto& c : node) c.nearness.clear();
  CHECK(nic(3).domain == "rdmap3");
  CHECK(nic(1).domain == "rdmap1");
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

// The seeds' nodes as hwloc reads them (an XML topology written here): which NICs each local rank drives under the
// placements launchers make. p4d.24xlarge: 2 sockets of 48 CPUs, 4 EFA NICs, two on each socket's PCIe root.
// p5.48xlarge: 2 sockets of 96 CPUs, 32 EFA NICs, 16 on each socket.
namespace {

struct Node {
  int sockets, cpus_per_socket, nics_per_socket;
};
constexpr Node kP4d{2, 48, 2};
constexpr Node kP5{2, 96, 16};

// hwloc's bitmap text: 32-bit words from the highest, "0x%08x" each, comma-separated.
std::string hwloc_bitmap(int first, int count) {
  const int words = (first + count + 31) / 32;
  std::string text;
  for (int w = words - 1; w >= 0; --w) {
    uint32_t bits = 0;
    for (int b = 0; b < 32; ++b) {
      const int cpu = w * 32 + b;
      if (cpu >= first && cpu < first + count) bits |= 1u << b;
    }
    char word[16];
    std::snprintf(word, sizeof word, "0x%08x", bits);
    text += (text.empty() ? "" : ",") + std::string(word);
  }
  return text;
}

// Socket s's NIC n: PCI bus 0x10 + 4 * (s * nics_per_socket + n), named as EFA's rdmap devices.
std::string nic_bus(const Node& node, int socket, int n) {
  char bus[32];
  std::snprintf(bus, sizeof bus, "0000:%02x:00.0", 0x10 + 0x4 * (socket * node.nics_per_socket + n));
  return bus;
}
std::string nic_name(const Node& node, int socket, int n) {
  return "rdmap" + std::to_string(socket * node.nics_per_socket + n) + "s0-rdm";
}

std::string topology_xml(const Node& node) {
  const int cpus = node.sockets * node.cpus_per_socket;
  auto sets = [](const std::string& cpu, const std::string& numa) {
    return " cpuset=\"" + cpu + "\" complete_cpuset=\"" + cpu + "\" nodeset=\"" + numa + "\" complete_nodeset=\"" +
           numa + "\"";
  };
  std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n";
  xml += "<topology version=\"2.0\">\n<object type=\"Machine\" os_index=\"0\"" +
         sets(hwloc_bitmap(0, cpus), hwloc_bitmap(0, node.sockets)) + " allowed_cpuset=\"" + hwloc_bitmap(0, cpus) +
         "\" allowed_nodeset=\"" + hwloc_bitmap(0, node.sockets) + "\">\n";
  for (int s = 0; s < node.sockets; ++s) {
    const std::string cpu = hwloc_bitmap(s * node.cpus_per_socket, node.cpus_per_socket);
    const std::string numa = hwloc_bitmap(s, 1);
    xml += "<object type=\"Package\" os_index=\"" + std::to_string(s) + "\"" + sets(cpu, numa) + ">\n";
    xml += "<object type=\"NUMANode\" os_index=\"" + std::to_string(s) + "\"" + sets(cpu, numa) +
           " local_memory=\"1073741824\"/>\n";
    for (int c = 0; c < node.cpus_per_socket; ++c) {
      const int id = s * node.cpus_per_socket + c;
      const std::string one = hwloc_bitmap(id, 1);
      xml += "<object type=\"Core\" os_index=\"" + std::to_string(id) + "\"" + sets(one, numa) +
             "><object type=\"PU\" os_index=\"" + std::to_string(id) + "\"" + sets(one, numa) + "/></object>\n";
    }
    for (int n = 0; n < node.nics_per_socket; ++n) {
      const std::string bus = nic_bus(node, s, n);
      xml += "<object type=\"Bridge\" bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"0000:[" + bus.substr(5, 2) + "-" +
             bus.substr(5, 2) + "]\">\n<object type=\"PCIDev\" pci_busid=\"" + bus +
             "\" pci_type=\"0200 [1d0f:efa1] [1d0f:efa1] 00\" pci_link_speed=\"0.000000\">\n<object type=\"OSDev\" "
             "name=\"" + nic_name(node, s, n).substr(0, nic_name(node, s, n).size() - 4) +
             "\" osdev_type=\"3\"/>\n</object>\n</object>\n";
    }
    xml += "</object>\n";
  }
  xml += "</object>\n</topology>\n";
  return xml;
}

// cpu_share()'s text for a rank on CPUs [first, first + count): CPU 0 in the lowest bit of the first hex digit.
std::string share_of(int first, int count) {
  std::string digits;
  for (int d = 0; d * 4 < first + count; ++d) {
    int digit = 0;
    for (int b = 0; b < 4; ++b) {
      const int cpu = d * 4 + b;
      if (cpu >= first && cpu < first + count) digit |= 1 << b;
    }
    digits += "0123456789abcdef"[digit];
  }
  return "boot-id " + digits;
}

enum class Placement { kContiguous, kCyclic, kUnbound };

// Each local rank's CPUs: contiguous blocks of cores in local-rank order (mpirun --map-by core, torchrun under
// numactl per rank), one socket after the other by local rank (srun --distribution=*:cyclic, Slurm's default across
// sockets), or the whole machine.
std::vector<std::string> shares(const Node& node, Placement placement, int ranks) {
  const int cpus = node.sockets * node.cpus_per_socket;
  std::vector<std::string> list;
  for (int l = 0; l < ranks; ++l) {
    if (placement == Placement::kUnbound) {
      list.push_back(share_of(0, cpus));
    } else if (placement == Placement::kContiguous) {
      list.push_back(share_of(l * (cpus / ranks), cpus / ranks));
    } else {
      const int per_socket = (ranks + node.sockets - 1) / node.sockets;
      const int width = node.cpus_per_socket / per_socket;
      list.push_back(share_of((l % node.sockets) * node.cpus_per_socket + (l / node.sockets) * width, width));
    }
  }
  return list;
}

// Every local rank's NICs on `node` under `placement`, with the provider listing the NICs in `order`.
std::vector<std::vector<std::string>> place(const Node& node, Placement placement, int ranks, bool reversed,
                                            const std::string& xml_path) {
  std::vector<hiercoll::topo::NicLocator> locators;
  std::vector<NicCandidate> candidates;
  for (int s = 0; s < node.sockets; ++s) {
    for (int n = 0; n < node.nics_per_socket; ++n) {
      locators.push_back({"", nic_bus(node, s, n)});
      NicCandidate c;
      c.domain = nic_name(node, s, n);
      c.physical = true;  // PCI devices, as libfabric's bus attributes say of EFA NICs
      c.speed_mbps = 100000;
      candidates.push_back(c);
    }
  }
  const auto nearness = hiercoll::topo::nic_nearness(locators, shares(node, placement, ranks), xml_path);
  REQUIRE(nearness.size() == static_cast<size_t>(ranks));
  for (size_t i = 0; i < candidates.size(); ++i) {
    for (const auto& row : nearness) candidates[i].nearness.push_back(row[i]);
  }
  if (reversed) std::reverse(candidates.begin(), candidates.end());
  std::vector<std::vector<std::string>> nics;
  for (int l = 0; l < ranks; ++l) {
    NicRequest request;
    request.local_rank = l;
    request.local_size = ranks;
    nics.push_back(choose_nic(candidates, request).domains);
  }
  return nics;
}

}  // namespace

TEST_CASE("every NIC of a p4d or p5 node is driven under contiguous, cyclic and unbound placements", "[nic]") {
  const auto [name, node] = GENERATE(table<std::string, Node>({{"p4d", kP4d}, {"p5", kP5}}));
  const auto [placement_name, placement] = GENERATE(table<std::string, Placement>(
      {{"contiguous", Placement::kContiguous}, {"cyclic", Placement::kCyclic}, {"unbound", Placement::kUnbound}}));
  const int ranks = GENERATE(8, 1);
  const std::string path = "/tmp/hiercoll-nic-choice-" + std::to_string(getpid()) + "-" + name + ".xml";
  {
    std::FILE* out = std::fopen(path.c_str(), "w");
    REQUIRE(out != nullptr);
    const std::string xml = topology_xml(node);
    std::fwrite(xml.data(), 1, xml.size(), out);
    std::fclose(out);
  }
  INFO(name << ", " << ranks << " rank(s) " << placement_name);
  const auto nics = place(node, placement, ranks, /*reversed=*/false, path);
  const auto other_node = place(node, placement, ranks, /*reversed=*/true, path);
  std::remove(path.c_str());
  const int total = node.sockets * node.nics_per_socket;
  // Every NIC driven, by as many ranks each; the same NICs for local rank l on a node whose provider lists them in
  // another order (the rails line up).
  std::map<std::string, int> users;
  for (const auto& mine : nics) {
    for (const auto& nic : mine) ++users[nic];
  }
  CHECK(static_cast<int>(users.size()) == total);
  for (const auto& [nic, count] : users) CHECK(count == std::max(1, ranks / total));
  CHECK(nics == other_node);
  // A rank bound within one socket drives only NICs on its own socket, where every socket has a rank (a lone rank
  // bound to one socket of two drives all: nic_choice.hpp, rule 4).
  if (placement != Placement::kUnbound && ranks >= node.sockets) {
    const auto cpu_shares = shares(node, placement, ranks);
    for (int l = 0; l < ranks; ++l) {
      const int socket = hiercoll::topo::share_cpus(cpu_shares[static_cast<size_t>(l)]).front() / node.cpus_per_socket;
      for (const auto& nic : nics[static_cast<size_t>(l)]) {
        const int index = std::stoi(nic.substr(5));
        CHECK(index / node.nics_per_socket == socket);
      }
    }
  }
}

// docs/cluster.md's placement table: NICs in use per node for each topology, placement and ranks per node, by this
// rule and by the rule it replaced (local rank l on near[l % near.size()], one NIC per rank). Hidden: it prints.
//   build/test/unit/hiercoll_unit_tests "[nic-table]"
TEST_CASE("the placement table", "[.][nic-table]") {
  std::printf("| node | placement | ranks per node | NICs in use, by position | NICs per rank (its stripe) | "
              "by local rank (before) |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const auto& [name, node] : std::vector<std::pair<std::string, Node>>{{"p4d", kP4d}, {"p5", kP5}}) {
    const std::string path = "/tmp/hiercoll-nic-table-" + std::to_string(getpid()) + ".xml";
    std::FILE* out = std::fopen(path.c_str(), "w");
    REQUIRE(out != nullptr);
    const std::string xml = topology_xml(node);
    std::fwrite(xml.data(), 1, xml.size(), out);
    std::fclose(out);
    for (const auto& [placement_name, placement] : std::vector<std::pair<std::string, Placement>>{
             {"contiguous", Placement::kContiguous}, {"cyclic", Placement::kCyclic}, {"unbound", Placement::kUnbound}}) {
      for (int ranks : {8, 1}) {
        std::set<std::string> now, before;
        std::set<size_t> stripes;
        for (const auto& mine : place(node, placement, ranks, false, path)) {
          now.insert(mine.begin(), mine.end());
          stripes.insert(mine.size());
        }
        std::string stripe;
        for (size_t k : stripes) stripe += (stripe.empty() ? "" : " or ") + std::to_string(k);
        // The old rule from the same near sets: the near NICs in order, local rank l takes l % their number.
        std::vector<hiercoll::topo::NicLocator> locators;
        std::vector<std::string> names;
        for (int s = 0; s < node.sockets; ++s) {
          for (int n = 0; n < node.nics_per_socket; ++n) {
            locators.push_back({"", nic_bus(node, s, n)});
            names.push_back(nic_name(node, s, n));
          }
        }
        const auto nearness = hiercoll::topo::nic_nearness(locators, shares(node, placement, ranks), path);
        for (int l = 0; l < ranks; ++l) {
          std::vector<std::string> near;
          for (size_t i = 0; i < names.size(); ++i) {
            if (nearness[static_cast<size_t>(l)][i] == Nearness::kNear) near.push_back(names[i]);
          }
          if (near.empty()) near = names;
          std::sort(near.begin(), near.end());
          before.insert(near[static_cast<size_t>(l) % near.size()]);
        }
        const int total = node.sockets * node.nics_per_socket;
        std::printf("| %s (%d sockets, %d NICs) | %s | %d | %zu of %d | %s | %zu |\n", name.c_str(), node.sockets,
                    total, placement_name.c_str(), ranks, now.size(), total, stripe.c_str(), before.size());
      }
    }
    std::remove(path.c_str());
  }
}

TEST_CASE("a link's facts come from sysfs: a device behind it, and its speed where the driver has one", "[nic]") {
  char dir_template[] = "/tmp/hiercoll-sysfs-XXXXXX";
  REQUIRE(mkdtemp(dir_template) != nullptr);
  const std::string root = dir_template;
  auto write = [](const std::string& path, const std::string& text) {
    std::FILE* out = std::fopen(path.c_str(), "w");
    REQUIRE(out != nullptr);
    std::fputs(text.c_str(), out);
    std::fclose(out);
  };
  for (const char* name : {"ens5", "hcnic0", "dock0", "eth1"}) REQUIRE(mkdir((root + "/" + name).c_str(), 0755) == 0);
  REQUIRE(mkdir((root + "/ens5/device").c_str(), 0755) == 0);  // the kernel's link to the PCI device
  write(root + "/ens5/speed", "100000\n");
  write(root + "/hcnic0/speed", "10000\n");  // a veth: a speed, no device
  write(root + "/eth1/speed", "-1\n");       // a link that is down
  const auto ens5 = hiercoll::topo::link_facts("ens5", root);
  CHECK(ens5.physical);
  CHECK(ens5.speed_mbps == 100000);
  const auto veth = hiercoll::topo::link_facts("hcnic0", root);
  CHECK_FALSE(veth.physical);
  CHECK(veth.speed_mbps == 10000);
  CHECK(hiercoll::topo::link_facts("dock0", root).speed_mbps == 0);  // no speed file: a bridge, a dummy
  CHECK(hiercoll::topo::link_facts("eth1", root).speed_mbps == 0);
  CHECK_FALSE(hiercoll::topo::link_facts("absent0", root).physical);
  std::system(("rm -rf " + root).c_str());
}
