// hiercoll::runtime_report (hiercoll/runtime.hpp): each layer tells what it found; this gathers them.
#include "hiercoll/runtime.hpp"

#include "gpu/device_path.hpp"
#include "hiercoll/version.hpp"
#include "launch/rendezvous.hpp"
#include "topo/hwloc_version.hpp"
#include "transport/fabric/libfabric.hpp"

namespace hiercoll {

RuntimeReport runtime_report() {
  RuntimeReport report;
  report.version = version();
  transport::LibfabricReport fabric = transport::libfabric_report();
  report.libfabric_loaded = fabric.loaded;
  report.libfabric_path = std::move(fabric.path);
  report.libfabric_version = std::move(fabric.version);
  report.providers = std::move(fabric.providers);
  report.libfabric_error = std::move(fabric.error);
  report.hwloc_version = topo::hwloc_version();
  report.pmix_version = launch::pmix_version();
  report.device_buffers = gpu::device_path_built();
  return report;
}

}  // namespace hiercoll
