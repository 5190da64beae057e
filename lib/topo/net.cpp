#include "topo/net.hpp"

#include <arpa/inet.h>
#include <hwloc.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "base/log.hpp"
#include "hiercoll/errors.hpp"
#include "topo/cpus.hpp"

namespace hiercoll::topo {
namespace {

std::string dotted(const sockaddr_in& address) {
  char text[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &address.sin_addr, text, sizeof text);
  return text;
}

}  // namespace

std::vector<NetInterface> net_interfaces() {
  std::vector<NetInterface> found;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return found;
  for (ifaddrs* it = list; it; it = it->ifa_next) {
    if (!(it->ifa_flags & IFF_UP)) continue;
    NetInterface* entry = nullptr;
    for (auto& known : found) {
      if (known.name == it->ifa_name) entry = &known;
    }
    if (!entry) {
      found.push_back({it->ifa_name, {}, (it->ifa_flags & IFF_LOOPBACK) != 0});
      entry = &found.back();
    }
    if (entry->ipv4.empty() && it->ifa_addr && it->ifa_addr->sa_family == AF_INET) {
      entry->ipv4 = dotted(*reinterpret_cast<const sockaddr_in*>(it->ifa_addr));
    }
  }
  freeifaddrs(list);
  return found;
}

std::string interface_address(const std::string& name) {
  for (const NetInterface& i : net_interfaces()) {
    if (i.name == name && !i.ipv4.empty()) return i.ipv4;
  }
  throw InvalidUsageError("HIERCOLL_SOCKET_IFNAME=" + name + ": no such interface that is up with an IPv4 address");
}

LinkFacts link_facts(const std::string& name, const std::string& sysfs) {
  LinkFacts facts;
  const std::string dir = sysfs + "/" + name;
  facts.physical = access((dir + "/device").c_str(), F_OK) == 0;
  if (std::FILE* file = std::fopen((dir + "/speed").c_str(), "r")) {
    long long speed = 0;
    // Reading fails (EINVAL) for links that have no speed, and a link that is down reports -1.
    if (std::fscanf(file, "%lld", &speed) == 1 && speed > 0) facts.speed_mbps = static_cast<uint64_t>(speed);
    std::fclose(file);
  }
  return facts;
}

std::string default_route_interface() {
  std::FILE* routes = std::fopen("/proc/net/route", "r");
  if (routes == nullptr) return {};
  char line[512];
  std::string found;
  if (std::fgets(line, sizeof line, routes) != nullptr) {  // the header
    while (found.empty() && std::fgets(line, sizeof line, routes) != nullptr) {
      char name[64] = {0};
      unsigned long destination = 1, gateway = 0, mask = 1;
      unsigned flags = 0;
      if (std::sscanf(line, "%63s %lx %lx %x %*d %*d %*d %lx", name, &destination, &gateway, &flags, &mask) == 5 &&
          destination == 0 && mask == 0 && (flags & 0x1u) != 0) {  // RTF_UP
        found = name;
      }
    }
  }
  std::fclose(routes);
  return found;
}

bool host_only_interface(const std::string& name) {
  for (const char* prefix : {"docker", "br-", "virbr", "veth", "cni", "flannel", "lxcbr", "lxdbr", "podman", "vmnet",
                             "vboxnet", "tun", "tap", "kube-"}) {
    if (name.compare(0, std::strlen(prefix), prefix) == 0) return true;
  }
  return false;
}

std::string outward_address() {
  const std::vector<NetInterface> interfaces = net_interfaces();
  auto usable = [](const NetInterface& i) { return !i.ipv4.empty() && !i.loopback && !host_only_interface(i.name); };
  const std::string routed = default_route_interface();
  for (const NetInterface& i : interfaces) {
    if (i.name == routed && usable(i)) return i.ipv4;
  }
  for (const NetInterface& i : interfaces) {
    if (usable(i)) return i.ipv4;
  }
  return "127.0.0.1";
}

std::string interface_toward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* resolved = nullptr;
  if (host.empty() || getaddrinfo(host.c_str(), "9", &hints, &resolved) != 0 || !resolved) return {};
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> owned(resolved, freeaddrinfo);
  // Connecting a datagram socket sends nothing: the kernel only picks the route, and with it the source address.
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  sockaddr_in local{};
  socklen_t length = sizeof local;
  const bool routed = ::connect(fd, resolved->ai_addr, resolved->ai_addrlen) == 0 &&
                      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
  ::close(fd);
  if (!routed) return {};
  const std::string source = dotted(local);
  // The address the route leaves from names the interface. A host's own address routes through loopback: there the
  // interface that owns the address is the answer (the store's host is one of the nodes), loopback only for 127/8.
  const std::string target = dotted(*reinterpret_cast<const sockaddr_in*>(resolved->ai_addr));
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return {};
  std::string by_source, by_owner;
  for (ifaddrs* it = list; it; it = it->ifa_next) {
    if (!it->ifa_addr || it->ifa_addr->sa_family != AF_INET) continue;
    const std::string address = dotted(*reinterpret_cast<const sockaddr_in*>(it->ifa_addr));
    if (address == target && by_owner.empty()) by_owner = it->ifa_name;
    if (address == source && by_source.empty()) by_source = it->ifa_name;
  }
  freeifaddrs(list);
  return by_owner.empty() ? by_source : by_owner;
}

std::string network_identity() {
  char netns[64] = {0};
  const ssize_t n = readlink("/proc/self/ns/net", netns, sizeof netns - 1);
  // The boot id too (host_identity): every machine's first network namespace has the same inode number.
  return host_identity() + "/" + (n > 0 ? std::string(netns, static_cast<size_t>(n)) : "net:?");
}

std::vector<std::vector<Nearness>> nic_nearness(const std::vector<NicLocator>& nics,
                                                const std::vector<std::string>& cpu_shares,
                                                const std::string& topology_xml) {
  using Bitmap = std::unique_ptr<hwloc_bitmap_s, void (*)(hwloc_bitmap_t)>;
  const size_t rows = std::max<size_t>(1, cpu_shares.size());
  std::vector<std::vector<Nearness>> result(rows, std::vector<Nearness>(nics.size(), Nearness::kUnknown));
  if (nics.empty()) return result;
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return result;
  std::unique_ptr<hwloc_topology, void (*)(hwloc_topology_t)> owned(raw, hwloc_topology_destroy);
  hwloc_topology_t topology = owned.get();
  hwloc_topology_set_io_types_filter(topology, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (!topology_xml.empty() && hwloc_topology_set_xml(topology, topology_xml.c_str()) != 0) {
    throw InvalidUsageError("hwloc cannot read the topology file " + topology_xml);
  }
  if (hwloc_topology_load(topology) != 0) return result;
  // Each row's CPUs: the share's, or this process's binding where no shares were given.
  std::vector<Bitmap> cpus;
  for (size_t r = 0; r < rows; ++r) {
    Bitmap set(hwloc_bitmap_alloc(), hwloc_bitmap_free);
    if (!set) return result;
    if (cpu_shares.empty()) {
      if (hwloc_get_cpubind(topology, set.get(), HWLOC_CPUBIND_PROCESS) != 0) return result;
    } else {
      for (int cpu : share_cpus(cpu_shares[r])) hwloc_bitmap_set(set.get(), static_cast<unsigned>(cpu));
    }
    cpus.push_back(std::move(set));
  }
  for (size_t i = 0; i < nics.size(); ++i) {
    hwloc_obj_t device = nullptr;
    unsigned domain = 0, bus = 0, dev = 0, func = 0;
    if (!nics[i].pci_bus_id.empty() &&
        std::sscanf(nics[i].pci_bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &dev, &func) == 4) {
      device = hwloc_get_pcidev_by_busid(topology, domain, bus, dev, func);
    }
    for (hwloc_obj_t os = hwloc_get_next_osdev(topology, nullptr); !device && os; os = hwloc_get_next_osdev(topology, os)) {
      if (!nics[i].netdev.empty() && os->name && nics[i].netdev == os->name) device = os;
    }
    if (!device) continue;  // virtual, or hwloc sees no PCI: no locality to go by
    hwloc_obj_t anchor = hwloc_get_non_io_ancestor_obj(topology, device);
    if (!anchor || !anchor->cpuset) continue;
    for (size_t r = 0; r < rows; ++r) {
      if (hwloc_bitmap_iszero(cpus[r].get())) continue;
      result[r][i] = hwloc_bitmap_intersects(anchor->cpuset, cpus[r].get()) ? Nearness::kNear : Nearness::kFar;
    }
  }
  return result;
}

}  // namespace hiercoll::topo
