#pragma once
// Memory registrations, for providers that need them (FI_MR_LOCAL, as EFA and verbs; or HIERCOLL_FABRIC_FORCE_MR).
// A registration lives exactly as long as something holds it: an operation's pin of its caller's buffers
// (engine/collective.cpp), the requests in flight on it, a buffer of ours pinned for that buffer's life (Scratch, the
// node's shared areas and staging buffers). A request finds a live registration that contains its range and holds it
// too; none is kept once the last holder lets go. So no registration outlives the pages it was made for: the caller
// may free a buffer once its operation returned, and memory mapped there later is registered afresh, where a cache
// that kept registrations past their operation would hand the NIC the old pages (it would need a memory monitor to
// learn of the unmap, as libfabric's own registration cache has: on EFA, FI_MR_CACHE_MONITOR, under which a
// registration per operation costs a lookup). Registering pins pages through the kernel, far too slow per message:
// what the messages of an operation use is pinned once for the operation, or once for good.
//
// Threads: acquire under the owner's lock (fabric_domain.hpp); a holder may let go on any thread, and the deregister
// function takes that lock itself.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace hiercoll::transport {

class MrRegistry {
 public:
  struct Registration {
    uintptr_t begin = 0, end = 0;  ///< whole pages
    void* handle = nullptr;        ///< The provider's object (struct fid_mr*), released by the deregister function.
    void* descriptor = nullptr;
  };
  /// Holds a registration; the last one dropped deregisters it.
  using Lease = std::shared_ptr<const Registration>;
  using RegisterFn = std::function<Registration(uintptr_t begin, size_t length)>;
  /// Called when a registration's last lease is dropped, which may be after the registry is gone: it must not use
  /// the registry (the provider's domain must still be open).
  using DeregisterFn = std::function<void(const Registration&)>;

  MrRegistry(RegisterFn register_fn, DeregisterFn deregister_fn);

  /// A live registration covering [address, address + length), or a new one of the pages that hold it. A new one
  /// keeps `owner` (the domain it is made in) alive until it is deregistered.
  Lease acquire(const void* address, size_t length, std::shared_ptr<void> owner = nullptr);

  /// Counters, readable from any thread.
  uint64_t registrations() const { return counters_->made.load(std::memory_order_relaxed); }  ///< made so far
  uint64_t reuses() const { return counters_->reused.load(std::memory_order_relaxed); }  ///< acquires that found one
  uint64_t live() const { return counters_->held.load(std::memory_order_relaxed); }      ///< not yet deregistered

 private:
  struct Counters {
    std::atomic<uint64_t> made{0}, reused{0}, held{0};
  };
  RegisterFn register_;
  DeregisterFn deregister_;
  std::vector<std::weak_ptr<const Registration>> live_;
  std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();  // shared with the leases' deleters
};

}  // namespace hiercoll::transport
