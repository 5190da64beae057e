#include "transport/mr_registry.hpp"

#include <unistd.h>

#include <algorithm>

namespace hiercoll::transport {

MrRegistry::MrRegistry(RegisterFn register_fn, DeregisterFn deregister_fn)
    : register_(std::move(register_fn)), deregister_(std::move(deregister_fn)) {}

MrRegistry::Lease MrRegistry::acquire(const void* address, size_t length, std::shared_ptr<void> owner) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(address);
  const uintptr_t end = begin + std::max<size_t>(length, 1);
  for (auto it = live_.begin(); it != live_.end();) {
    Lease held = it->lock();
    if (!held) {
      it = live_.erase(it);
      continue;
    }
    if (held->begin <= begin && end <= held->end) {
      counters_->reused.fetch_add(1, std::memory_order_relaxed);
      return held;
    }
    ++it;
  }
  const uintptr_t aligned_begin = begin & ~(page - 1);
  const uintptr_t aligned_end = (end + page - 1) & ~(page - 1);
  Registration made = register_(aligned_begin, aligned_end - aligned_begin);  // throws where the provider refuses
  made.begin = aligned_begin;
  made.end = aligned_end;
  counters_->made.fetch_add(1, std::memory_order_relaxed);
  counters_->held.fetch_add(1, std::memory_order_relaxed);
  // The owner is let go inside the call, not with the deleter: the deleter lives in the lease's control block as long
  // as live_'s weak pointer to it, and live_ is the owner's.
  Lease lease(new Registration(made),
              [deregister = deregister_, counters = counters_, owner = std::move(owner)](const Registration* r) mutable {
                deregister(*r);
                counters->held.fetch_sub(1, std::memory_order_relaxed);
                delete r;
                owner.reset();  // may close the domain: last
              });
  live_.push_back(lease);
  return lease;
}

}  // namespace hiercoll::transport
