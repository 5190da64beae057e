// Which libfabric provider, and which of its NICs, a rank's endpoint opens (provider_choice.hpp).
#include "transport/fabric/provider_choice.hpp"

#include <dirent.h>
#include <rdma/fi_errno.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "base/log.hpp"
#include "base/text.hpp"
#include "hiercoll/errors.hpp"
#include "topo/net.hpp"
#include "transport/fabric/libfabric.hpp"
#include "transport/fabric/nic_choice.hpp"

namespace hiercoll::transport {
namespace {

// The hints every provider is asked with. mr_mode lists what hiercoll can do, not what it wants: without
// FI_MR_LOCAL a provider that can register host memory itself does (EFA, through its own cache with a memory
// monitor, so a freed and remapped buffer is noticed); FI_MR_LOCAL only where a provider cannot run without it.
fi_info* hints_for(const std::string& provider, bool allow_mr_local) {
  fi_info* hints = libfabric().dupinfo(nullptr);  // fi_allocinfo, through the loaded library
  if (hints == nullptr) throw SystemError("fabric: fi_allocinfo: out of memory");
  hints->caps = FI_TAGGED;
  hints->ep_attr->type = FI_EP_RDM;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->domain_attr->mr_mode = FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | (allow_mr_local ? FI_MR_LOCAL : 0);
  hints->tx_attr->msg_order = FI_ORDER_SAS;
  hints->rx_attr->msg_order = FI_ORDER_SAS;
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  return hints;
}

// hiercoll's tags use all 64 bits (algo/channel.hpp). A provider reserving some (mem_tag_format without bit 63,
// as the net provider's 0x5555... formats) would drop or alias them: such an info is not used.
bool carries_our_tags(const fi_info* info) {
  const uint64_t format = info->ep_attr->mem_tag_format;
  return format == 0 || (format >> 63) != 0;
}

// The most ranks the shm provider joins: libfabric 1.17's fi_av_insert fails for the 257th peer. Past it a one-host
// job takes a network provider over loopback.
constexpr int kShmMostRanks = 256;

// The NIC (libfabric domain) this rank opens: nic_choice.hpp's rule over the provider's domains. Of one domain's
// infos the IPv4 one where there is one, so that the published address names a host the others can reach.
std::vector<fi_info*> choose_domains(const std::vector<fi_info*>& infos, const FabricOptions& options,
                                     std::string& why) {
  std::vector<NicCandidate> candidates;
  std::vector<topo::NicLocator> locators;
  std::vector<std::string> loopbacks;
  for (const auto& i : topo::net_interfaces()) {
    if (i.loopback) loopbacks.push_back(i.name);
  }
  for (fi_info* info : infos) {
    const std::string domain = info->domain_attr->name ? info->domain_attr->name : "";
    bool known = false;
    for (const auto& c : candidates) known = known || c.domain == domain;
    if (known) continue;
    NicCandidate candidate;
    candidate.domain = domain;
    candidate.loopback = std::find(loopbacks.begin(), loopbacks.end(), domain) != loopbacks.end();
    // What the provider says of the NIC (EFA and verbs fill fi_nic), else what the kernel says of the interface
    // of that name (the socket providers' domains are interface names).
    const topo::LinkFacts link = topo::link_facts(domain);
    candidate.physical = link.physical;
    candidate.speed_mbps = link.speed_mbps;
    topo::NicLocator locator;
    locator.netdev = domain;
    if (info->nic && info->nic->bus_attr && info->nic->bus_attr->bus_type == FI_BUS_PCI) {
      const auto& pci = info->nic->bus_attr->attr.pci;
      char bus[32];
      std::snprintf(bus, sizeof bus, "%04x:%02x:%02x.%x", pci.domain_id, pci.bus_id, pci.device_id, pci.function_id);
      locator.pci_bus_id = bus;
      candidate.physical = true;
    }
    if (info->nic && info->nic->link_attr && info->nic->link_attr->speed > 0)
      candidate.speed_mbps = static_cast<uint64_t>(info->nic->link_attr->speed / 1000000);
    candidates.push_back(candidate);
    locators.push_back(locator);
  }
  NicRequest request;
  request.local_rank = options.local_rank;
  request.local_size = options.local_size;
  if (candidates.size() > 1 && options.across_nodes) {
    // Every local rank's row where the node's shares came (rule 4 places this rank among them); else its own alone,
    // as local rank 0 of one.
    const bool all = static_cast<int>(options.local_cpu_shares.size()) == options.local_size;
    const auto nearness = topo::nic_nearness(locators, all ? options.local_cpu_shares : std::vector<std::string>{});
    for (size_t i = 0; i < candidates.size(); ++i) {
      for (const auto& row : nearness) candidates[i].nearness.push_back(row[i]);
    }
    if (!all) {
      for (auto& c : candidates) c.nearness.assign(static_cast<size_t>(options.local_size), c.nearness.front());
    }
  }
  request.spec = options.interface;
  request.toward = options.rendezvous_host.empty() ? "" : topo::interface_toward(options.rendezvous_host);
  request.across_nodes = options.across_nodes;
  const NicChoice choice = choose_nic(candidates, request);
  why = choice.why;
  if (choice.domains.size() > 1) why += "; it stripes over " + std::to_string(choice.domains.size()) + " NICs";
  std::vector<fi_info*> chosen;
  for (const std::string& domain : choice.domains) {
    fi_info* first = nullptr;
    fi_info* ipv4 = nullptr;
    for (fi_info* info : infos) {
      if (!info->domain_attr->name || domain != info->domain_attr->name) continue;
      if (!first) first = info;
      if (!ipv4 && info->addr_format == FI_SOCKADDR_IN) ipv4 = info;
    }
    chosen.push_back(ipv4 ? ipv4 : first);
  }
  return chosen;
}

// An EFA device the efa provider cannot open (a container without /dev/infiniband, a libfabric built without it)
// leaves a node on TCP at a fraction of its bandwidth: worth a warning, not only an INFO line.
void warn_if_efa_unused() {
  std::string devices;
  if (DIR* dir = opendir("/sys/class/infiniband")) {
    while (dirent* entry = readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      const std::string link = std::string("/sys/class/infiniband/") + entry->d_name + "/device/driver";
      char target[512];
      const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = 0;
      const char* driver = std::strrchr(target, '/');
      if (driver && std::strcmp(driver + 1, "efa") == 0) base::append_listed(devices, entry->d_name);
    }
    closedir(dir);
  }
  if (!devices.empty()) {
    HIERCOLL_LOG(kWarn, "fabric: EFA device(s) "
                            << devices
                            << " present but the efa provider is not usable; running "
                               "over tcp. Check that /dev/infiniband is visible and libfabric has efa "
                               "(`fi_info -p efa`)");
  }
}

}  // namespace

// RxM posts FI_OFI_RXM_MSG_RX_SIZE bounce buffers of its eager size to the shared receive context of its first
// endpoint: by libfabric's default 4096 of 16 KB, 64 MB in every process and most of a rank's memory. What arrives
// at one rank at once is far less (a pipeline's slots from each peer it receives from, fit_chunks_to_provider), so
// where the job left the variable unset it gets Settings' count (figures: `git log -S size_rxm_receive_buffers`).
// RxD (udp's reliable datagrams) sends up to FI_OFI_RXD_MAX_UNACKED datagrams to a peer before it waits for an
// acknowledgement, 128 by default: with both directions of a ring running, the windows overflow the receiver's
// socket buffer, and what is dropped waits for RxD's retransmit timer. Settings' smaller window keeps the datagrams
// in the buffer (docs/cluster.md, "udp before and after"). libfabric reads both once, at the process's first
// fi_getinfo, which is why this comes first. setenv beside threads that read the environment is the risk every
// library that configures libfabric takes (aws-ofi-nccl's init too).
void size_provider_buffers(size_t rxm_rx_buffers, size_t rxd_max_unacked) {
  static std::once_flag once;
  std::call_once(once, [=] {
    setenv("FI_OFI_RXM_MSG_RX_SIZE", std::to_string(rxm_rx_buffers).c_str(), /*overwrite=*/0);
    setenv("FI_OFI_RXD_MAX_UNACKED", std::to_string(rxd_max_unacked).c_str(), /*overwrite=*/0);
  });
}

ProviderChoice::~ProviderChoice() {
  for (fi_info* info : infos) {
    if (info) libfabric().freeinfo(info);
  }
}

ProviderChoice choose_provider(const FabricOptions& options) {
  const Libfabric& lib = libfabric();
  std::vector<std::string> providers;
  if (!options.provider.empty()) {
    providers.push_back(options.provider);
  } else if (!options.across_nodes && options.local_size <= kShmMostRanks) {
    // Every rank on one host: libfabric's shared-memory provider first. Nothing leaves the host, and it holds a
    // fraction of RxM's buffers (docs/scaling.md, memory per rank) and passes messages faster than loopback TCP.
    providers = {"shm", "efa", "tcp"};
  } else {
    providers = {"efa", "tcp"};
  }
  std::string tried;
  for (const auto& name : providers) {
    fi_info* list = nullptr;
    int rc = -FI_ENODATA;
    for (bool mr_local : {false, true}) {
      fi_info* hints = hints_for(name, mr_local);
      rc = lib.getinfo(lib.api(), nullptr, nullptr, 0, hints, &list);
      lib.freeinfo(hints);
      if (rc == 0 && list) break;
    }
    base::append_listed(tried, name + " (" + (rc ? lib.strerror(-rc) : "ok") + ")");
    if (rc != 0 || list == nullptr) continue;
    std::unique_ptr<fi_info, void (*)(fi_info*)> owned(list, lib.freeinfo);
    std::vector<fi_info*> usable;
    for (fi_info* info = list; info != nullptr; info = info->next) {
      if (carries_our_tags(info)) usable.push_back(info);
    }
    if (usable.empty()) {
      tried += " (its tag format is narrower than hiercoll's 64-bit tags)";
      continue;
    }
    if (name == "shm" && options.across_nodes) {
      throw InvalidUsageError(
          "HIERCOLL_FABRIC_PROVIDER=shm reaches only the ranks of one host, and this job spans "
          "several nodes: use a network provider (tcp, efa, ...) across nodes");
    }
    if (name == "shm" && options.local_size > kShmMostRanks) {
      throw InvalidUsageError("HIERCOLL_FABRIC_PROVIDER=shm joins at most " + std::to_string(kShmMostRanks) +
                              " ranks (libfabric's shm address vector), and this host has " +
                              std::to_string(options.local_size) + ": use tcp");
    }
    // shm has one domain and no NIC: HIERCOLL_FABRIC_IFACE, which names NICs, has nothing to choose there.
    ProviderChoice choice;
    const std::vector<fi_info*> chosen =
        name == "shm" ? std::vector<fi_info*>{usable.front()} : choose_domains(usable, options, choice.why);
    if (name == "tcp" && options.provider.empty()) warn_if_efa_unused();
    for (fi_info* info : chosen) choice.infos.push_back(lib.dupinfo(info));
    return choice;
  }
  throw FabricError("no usable libfabric provider for FI_EP_RDM + FI_TAGGED; tried: " + tried +
                    ". Set HIERCOLL_FABRIC_PROVIDER to one of `fi_info -l`.");
}

}  // namespace hiercoll::transport
