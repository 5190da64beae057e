// Which endpoint a communicator opens: the table of transport.hpp's open_endpoint.
#include "base/log.hpp"
#include "hiercoll/errors.hpp"
#include "transport/fabric/libfabric.hpp"
#include "transport/memory/memory_fabric.hpp"
#include "transport/transport.hpp"
#include "transport/unix/unix_endpoint.hpp"

namespace hiercoll::transport {

std::unique_ptr<Endpoint> open_endpoint(const FabricOptions& options) {
  if (options.provider == "memory") return open_memory_endpoint();
  if (options.provider == "unix" && options.across_nodes) {
    throw InvalidUsageError(
        "HIERCOLL_FABRIC_PROVIDER=unix reaches only the ranks of one host, and this job spans several nodes: use a "
        "libfabric provider (tcp, efa, ...) across nodes");
  }
  if (options.provider == "unix") return open_unix_endpoint();
  if (options.provider.empty() && !options.across_nodes && !libfabric_available()) {
    // libfabric_available() loaded it where it could; here it could not, and one host needs no network.
    HIERCOLL_LOG(kInfo, "no libfabric loaded, so the ranks of this host pass their messages over Unix sockets "
                        "(provider unix); a job across hosts would need it. "
                            << libfabric_report().error);
    return open_unix_endpoint();
  }
  return open_fabric_endpoint(options);
}

}  // namespace hiercoll::transport
