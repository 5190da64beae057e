#pragma once
// Memory-registration cache. Providers such as EFA need every buffer registered (FI_MR_LOCAL), and
// registering pins pages through the kernel, far too slow to do per message. Registrations cover whole
// pages, are reused for any buffer inside them, and are evicted least-recently-used when the cache is full
// and nobody holds them.
//
// Caveat (as with every user-space MR cache): if the application frees a buffer and the same virtual range
// is later mapped to other pages, a stale registration would be reused. Set HIERCOLL_MR_CACHE_ENTRIES=0 to
// register per operation instead.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace hiercoll::transport {

class MrCache {
 public:
  struct Registration {
    uintptr_t begin = 0, end = 0;
    void* handle = nullptr;  ///< The provider's object (struct fid_mr*), released by the deregister function.
    void* descriptor = nullptr;
    uint64_t last_use = 0;
  };
  /// A registration held while an operation uses it; it cannot be evicted before the lease is dropped.
  using Lease = std::shared_ptr<const Registration>;
  using RegisterFn = std::function<Registration(uintptr_t begin, size_t length)>;
  using DeregisterFn = std::function<void(const Registration&)>;

  MrCache(size_t capacity, RegisterFn register_fn, DeregisterFn deregister_fn);
  ~MrCache();
  MrCache(const MrCache&) = delete;
  MrCache& operator=(const MrCache&) = delete;

  /// A registration covering [address, address + length).
  Lease acquire(const void* address, size_t length);
  /// Memory in [address, address + length) is about to be freed: no registration overlapping it is handed out again,
  /// and each is deregistered as soon as no lease holds it.
  void invalidate(const void* address, size_t length);

  size_t size() const { return entries_.size(); }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }
  uint64_t evictions() const { return evictions_; }

 private:
  void evict_if_full();

  size_t capacity_;
  RegisterFn register_;
  DeregisterFn deregister_;
  void release_retired();

  std::vector<std::shared_ptr<Registration>> entries_;
  std::vector<std::shared_ptr<Registration>> retired_;  // invalidated while leased: deregistered when released
  uint64_t clock_ = 0, hits_ = 0, misses_ = 0, evictions_ = 0;
};

}  // namespace hiercoll::transport
