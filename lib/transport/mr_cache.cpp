#include "transport/mr_cache.hpp"

#include <unistd.h>

#include <algorithm>

namespace hiercoll::transport {

MrCache::MrCache(size_t capacity, RegisterFn register_fn, DeregisterFn deregister_fn)
    : capacity_(capacity), register_(std::move(register_fn)), deregister_(std::move(deregister_fn)) {}

MrCache::~MrCache() {
  for (auto& entry : entries_) deregister_(*entry);
  for (auto& entry : retired_) deregister_(*entry);
}

void MrCache::invalidate(const void* address, size_t length) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(address), end = begin + std::max<size_t>(length, 1);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if ((*it)->begin < end && begin < (*it)->end) {
      retired_.push_back(std::move(*it));
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  release_retired();
}

void MrCache::release_retired() {
  for (auto it = retired_.begin(); it != retired_.end();) {
    if (it->use_count() == 1) {
      deregister_(**it);
      it = retired_.erase(it);
    } else {
      ++it;
    }
  }
}

MrCache::Lease MrCache::acquire(const void* address, size_t length) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t begin = reinterpret_cast<uintptr_t>(address);
  uintptr_t end = begin + std::max<size_t>(length, 1);
  ++clock_;
  if (!retired_.empty()) release_retired();
  for (auto& entry : entries_) {
    if (entry->begin <= begin && end <= entry->end) {
      ++hits_;
      entry->last_use = clock_;
      return entry;
    }
  }
  ++misses_;
  uintptr_t aligned_begin = begin & ~(page - 1);
  uintptr_t aligned_end = (end + page - 1) & ~(page - 1);
  auto entry = std::make_shared<Registration>(register_(aligned_begin, aligned_end - aligned_begin));
  entry->begin = aligned_begin;
  entry->end = aligned_end;
  entry->last_use = clock_;
  if (capacity_ == 0) {
    // No caching: the registration lives exactly as long as the lease.
    auto deregister = deregister_;
    return Lease(entry.get(), [entry, deregister](const Registration*) { deregister(*entry); });
  }
  evict_if_full();
  entries_.push_back(entry);
  return entry;
}

void MrCache::evict_if_full() {
  while (entries_.size() >= capacity_) {
    // Least recently used among those no operation holds (use_count 1: only the cache).
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->use_count() == 1 && (victim == entries_.end() || (*it)->last_use < (*victim)->last_use)) victim = it;
    }
    if (victim == entries_.end()) return;  // all in use: grow past capacity rather than fail
    deregister_(**victim);
    entries_.erase(victim);
    ++evictions_;
  }
}

}  // namespace hiercoll::transport
