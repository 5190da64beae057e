#include "transport/fabric/fabric_domain.hpp"

#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include <map>

#include "base/log.hpp"
#include "hiercoll/errors.hpp"
#include "transport/fabric/libfabric.hpp"
#include "transport/transport.hpp"

namespace hiercoll::transport {
namespace {

std::atomic<uint64_t> open_fabrics{0}, open_domains{0}, open_endpoints{0};

std::string name_or_empty(const char* name) { return name ? name : ""; }

}  // namespace

struct FabricDomain::Fabric {
  fid_fabric* fabric = nullptr;
  ~Fabric() {
    close_fabric_object(&fabric->fid, "fi_close(fabric)");
    open_fabrics.fetch_sub(1, std::memory_order_relaxed);
  }
};

namespace {

// What is open, by provider, fabric and NIC: weak, so that the last user closes it. Never destroyed (a communicator
// that outlives static destruction still closes its domain through it).
struct Opened {
  std::mutex mutex;
  std::map<std::string, std::weak_ptr<FabricDomain::Fabric>> fabrics;
  std::map<std::string, std::weak_ptr<FabricDomain>> domains;
};
Opened& opened() {
  static Opened* const registry = new Opened;
  return *registry;
}

}  // namespace

std::shared_ptr<FabricDomain> FabricDomain::open(const fi_info& info) {
  const std::string provider = name_or_empty(info.fabric_attr->prov_name);
  const std::string fabric_key = provider + "|" + name_or_empty(info.fabric_attr->name);
  const std::string domain_key = fabric_key + "|" + name_or_empty(info.domain_attr->name);
  Opened& registry = opened();
  std::lock_guard<std::mutex> guard(registry.mutex);
  if (auto domain = registry.domains[domain_key].lock()) return domain;

  std::shared_ptr<Fabric> fabric = registry.fabrics[fabric_key].lock();
  if (!fabric) {
    fid_fabric* handle = nullptr;
    const int rc = libfabric().fabric(info.fabric_attr, &handle, nullptr);
    if (rc != 0) throw FabricError(fabric_call_failed("fi_fabric", rc));
    fabric = std::make_shared<Fabric>();
    fabric->fabric = handle;
    open_fabrics.fetch_add(1, std::memory_order_relaxed);
    registry.fabrics[fabric_key] = fabric;
  }
  std::shared_ptr<FabricDomain> domain(new FabricDomain(std::move(fabric), info));
  registry.domains[domain_key] = domain;
  HIERCOLL_LOG(kTrace, "fabric: opened domain " << domain_key);
  return domain;
}

FabricDomain::FabricDomain(std::shared_ptr<Fabric> fabric, const fi_info& info)
    : fabric_(std::move(fabric)),
      provider_keys_((info.domain_attr->mr_mode & FI_MR_PROV_KEY) != 0),
      registry_(
          [this](uintptr_t begin, size_t length) {
            fid_mr* mr = nullptr;
            // Without FI_MR_PROV_KEY a second registration asking for the key of a live one fails with "Required
            // key not available".
            const uint64_t key = provider_keys_ ? 0 : next_key_++;
            const int rc =
                fi_mr_reg(domain_, reinterpret_cast<void*>(begin), length, FI_SEND | FI_RECV, 0, key, 0, &mr, nullptr);
            if (rc != 0) throw FabricError(fabric_call_failed("fi_mr_reg", rc));
            MrRegistry::Registration made;
            made.handle = mr;
            made.descriptor = fi_mr_desc(mr);
            return made;
          },
          // The lease that calls this keeps the domain open (register_memory passes it as the owner).
          [this](const MrRegistry::Registration& made) {
            auto held = lock();
            close_fabric_object(&static_cast<fid_mr*>(made.handle)->fid, "fi_close(memory registration)");
          }) {
  fi_info* copy = libfabric().dupinfo(&info);  // fi_domain takes a non-const info
  const int rc = fi_domain(fabric_->fabric, copy, &domain_, nullptr);
  libfabric().freeinfo(copy);
  if (rc != 0) throw FabricError(fabric_call_failed("fi_domain", rc));
  open_domains.fetch_add(1, std::memory_order_relaxed);
}

FabricDomain::~FabricDomain() {
  // Every endpoint on it is closed and every registration let go (each held the domain).
  close_fabric_object(&domain_->fid, "fi_close(domain)");
  open_domains.fetch_sub(1, std::memory_order_relaxed);
}

fid_fabric* FabricDomain::fabric() const { return fabric_->fabric; }

MrRegistry::Lease FabricDomain::register_memory(const void* buffer, size_t bytes) {
  return registry_.acquire(buffer, bytes, shared_from_this());
}

void FabricDomain::endpoint_opened() { open_endpoints.fetch_add(1, std::memory_order_relaxed); }
void FabricDomain::endpoint_closed() { open_endpoints.fetch_sub(1, std::memory_order_relaxed); }

FabricCensus fabric_census() {
  FabricCensus census;
  census.fabrics = open_fabrics.load(std::memory_order_relaxed);
  census.domains = open_domains.load(std::memory_order_relaxed);
  census.endpoints = open_endpoints.load(std::memory_order_relaxed);
  return census;
}

}  // namespace hiercoll::transport
