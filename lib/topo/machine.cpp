// hwloc discovery: cores, NUMA nodes, and the PCI devices (GPUs, NICs) with their locality.
#include <hwloc.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <sstream>

#include "base/log.hpp"
#include "hiercoll/topology.hpp"
#include "topo/hwloc_version.hpp"

namespace hiercoll {
namespace {

std::string describe_device(hwloc_obj_t osdev) {
  std::ostringstream out;
  out << osdev->name;
  const char* subtype = osdev->subtype;
  if (subtype) out << " (" << subtype << ")";
  for (hwloc_obj_t parent = osdev->parent; parent; parent = parent->parent) {
    if (parent->type == HWLOC_OBJ_PCI_DEVICE) {
      char bus[32];
      std::snprintf(bus, sizeof(bus), "%04x:%02x:%02x.%01x", parent->attr->pcidev.domain, parent->attr->pcidev.bus,
                    parent->attr->pcidev.dev, parent->attr->pcidev.func);
      out << " PCI " << bus;
      break;
    }
  }
  return out.str();
}

}  // namespace

std::string MachineInfo::describe() const {
  std::ostringstream out;
  out << cores << " cores, " << hardware_threads << " hardware threads, " << numa_nodes << " NUMA node(s); GPUs:";
  if (gpus.empty()) out << " none";
  for (const auto& g : gpus) out << " [" << g << "]";
  out << "; NICs:";
  if (nics.empty()) out << " none";
  for (const auto& n : nics) out << " [" << n << "]";
  return out.str();
}

MachineInfo detect_machine() {
  MachineInfo info;
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) {
    HIERCOLL_LOG(kWarn, "hwloc_topology_init failed (" << std::strerror(errno) << "): machine layout unknown");
    return info;
  }
  // Destroyed on every path, the throwing ones (describe_device allocates) included.
  std::unique_ptr<hwloc_topology, void (*)(hwloc_topology_t)> owned(raw, hwloc_topology_destroy);
  hwloc_topology_t topology = owned.get();
  hwloc_topology_set_io_types_filter(topology, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topology) != 0) {
    HIERCOLL_LOG(kWarn, "hwloc_topology_load failed (" << std::strerror(errno) << "): machine layout unknown");
  } else {
    info.cores = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_CORE);
    info.hardware_threads = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PU);
    info.numa_nodes = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_NUMANODE);
    for (hwloc_obj_t osdev = hwloc_get_next_osdev(topology, nullptr); osdev;
         osdev = hwloc_get_next_osdev(topology, osdev)) {
      switch (osdev->attr->osdev.type) {
        case HWLOC_OBJ_OSDEV_GPU:
        case HWLOC_OBJ_OSDEV_COPROC: info.gpus.push_back(describe_device(osdev)); break;
        case HWLOC_OBJ_OSDEV_NETWORK:
        case HWLOC_OBJ_OSDEV_OPENFABRICS: info.nics.push_back(describe_device(osdev)); break;
        default: break;
      }
    }
  }
  return info;
}

}  // namespace hiercoll

namespace hiercoll::topo {

std::string hwloc_version() {
  const unsigned v = hwloc_get_api_version();
  return std::to_string(v >> 16) + "." + std::to_string((v >> 8) & 0xff) + "." + std::to_string(v & 0xff);
}

}  // namespace hiercoll::topo
