#pragma once
// Which libfabric provider a rank's endpoint opens, and on which of its NICs: the provider from HIERCOLL_FABRIC_
// PROVIDER or the job's shape (one host: shm first; otherwise efa, then tcp), infos whose tag format carries
// hiercoll's 64-bit tags, and the domain by nic_choice.hpp's rule over the facts gathered here (libfabric's domains,
// the kernel's route, hwloc's locality).
#include <rdma/fabric.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/transport.hpp"

namespace hiercoll::transport {

struct ProviderChoice {
  /// One info per NIC the rank takes, in its stripe's order (nic_choice.hpp's NicChoice::domains); a caller that
  /// takes one sets its entry to null, and the destructor frees the rest.
  std::vector<fi_info*> infos;
  std::string why;  ///< why these NICs (for the start-up log); "" on shm, which has none

  ProviderChoice() = default;
  ProviderChoice(const ProviderChoice&) = delete;
  ProviderChoice& operator=(const ProviderChoice&) = delete;
  ProviderChoice(ProviderChoice&& other) noexcept : infos(std::move(other.infos)), why(std::move(other.why)) {
    other.infos.clear();
  }
  ~ProviderChoice();
};

/// Throws FabricError naming every provider tried when none is usable (or where libfabric cannot be loaded:
/// libfabric.hpp), InvalidUsageError for a provider the job's shape cannot use (shm across nodes, or for more ranks
/// than it joins).
ProviderChoice choose_provider(const FabricOptions& options);

/// Sets FI_OFI_RXM_MSG_RX_SIZE and FI_OFI_RXD_MAX_UNACKED where the job left them unset, once per process; it must
/// run before the process's first fi_getinfo (libfabric reads them once).
void size_provider_buffers(size_t rxm_rx_buffers, size_t rxd_max_unacked);

}  // namespace hiercoll::transport
