#pragma once
// One libfabric fabric and one domain per process and NIC, shared by the endpoints of every communicator on that NIC.
// A torch job opens a communicator per process group (DDP's world, FSDP's shard and replicate groups, a DeviceMesh's
// dimensions); a domain apiece would give each its own device context, protection domain and registrations on EFA,
// and a buffer registered by one group would be registered again by the next. aws-ofi-nccl keeps a domain per NIC
// (per thread on some platforms) for the same reason. Each communicator keeps its own endpoint, completion queue
// and address vector: their tags, order and failures are its own.
//
// Threads: hiercoll asks for FI_THREAD_DOMAIN, under which the provider may take no lock of its own, so every call
// into the domain or an object opened on it (endpoint, queue, address vector, registration) holds lock(). The
// communicators' threads share it; nothing blocks inside the provider while holding it (waits sleep on the queue's
// fd or an eventfd, outside).
#include <rdma/fabric.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "transport/mr_registry.hpp"

namespace hiercoll::transport {

class FabricDomain : public std::enable_shared_from_this<FabricDomain> {
 public:
  /// The process's open domain for `info`'s provider, fabric and NIC, or a new one opened from `info` (which stays
  /// the caller's). Thread-safe. Throws FabricError where fi_fabric or fi_domain fails.
  static std::shared_ptr<FabricDomain> open(const fi_info& info);
  ~FabricDomain();
  FabricDomain(const FabricDomain&) = delete;
  FabricDomain& operator=(const FabricDomain&) = delete;

  fid_fabric* fabric() const;
  fid_domain* domain() const { return domain_; }

  /// Held by every call into the domain's objects. Recursive: a registration's last holder may let go inside an
  /// endpoint's call (a request finishing), and deregistering takes the lock too.
  std::unique_lock<std::recursive_mutex> lock() { return std::unique_lock<std::recursive_mutex>(mutex_); }

  /// A registration covering [buffer, buffer + bytes), shared with every endpoint on the domain (mr_registry.hpp).
  /// A live registration keeps the domain open. Under lock().
  MrRegistry::Lease register_memory(const void* buffer, size_t bytes);
  /// The domain's registrations: made so far and held now. Any thread.
  uint64_t registrations_made() const { return registry_.registrations(); }
  uint64_t registrations_held() const { return registry_.live(); }

  /// Endpoints count themselves here (FabricEndpoint's open and close), for fabric_census().
  static void endpoint_opened();
  static void endpoint_closed();

  struct Fabric;  ///< a fi_fabric, shared by the domains of one provider's fabric (fabric_domain.cpp)

 private:
  FabricDomain(std::shared_ptr<Fabric> fabric, const fi_info& info);

  std::shared_ptr<Fabric> fabric_;  // shared by the domains of one provider's fabric
  fid_domain* domain_ = nullptr;
  std::recursive_mutex mutex_;
  bool provider_keys_ = false;  // FI_MR_PROV_KEY: the provider chooses registration keys
  uint64_t next_key_ = 1;       // otherwise every live registration needs its own (under lock())
  MrRegistry registry_;
};

}  // namespace hiercoll::transport
