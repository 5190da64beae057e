#include "transport/mr_cache.hpp"

#include <catch2/catch.hpp>
#include <map>
#include <vector>

using hiercoll::transport::MrCache;

namespace {
// A fake provider that counts live registrations.
struct FakeProvider {
  std::map<uintptr_t, size_t> live;
  int registrations = 0;
  MrCache make(size_t capacity) {
    return MrCache(
        capacity,
        [this](uintptr_t begin, size_t length) {
          ++registrations;
          live[begin] = length;
          MrCache::Registration reg;
          reg.descriptor = reinterpret_cast<void*>(begin);
          return reg;
        },
        [this](const MrCache::Registration& reg) { live.erase(reinterpret_cast<uintptr_t>(reg.descriptor)); });
  }
};
}  // namespace

TEST_CASE("the MR cache reuses a registration for any range inside it", "[mr]") {
  FakeProvider provider;
  std::vector<char> buffer(1 << 20);
  {
    MrCache cache = provider.make(8);
    auto whole = cache.acquire(buffer.data(), buffer.size());
    auto part = cache.acquire(buffer.data() + 4096, 100);
    CHECK(whole.get() == part.get());
    CHECK(cache.hits() == 1);
    CHECK(cache.misses() == 1);
    CHECK(provider.registrations == 1);
    CHECK(whole->begin <= reinterpret_cast<uintptr_t>(buffer.data()));
    CHECK(whole->end >= reinterpret_cast<uintptr_t>(buffer.data() + buffer.size()));
  }
  CHECK(provider.live.empty());  // the cache deregisters everything when it goes
}

TEST_CASE("the MR cache evicts the least recently used unheld registration", "[mr]") {
  FakeProvider provider;
  std::vector<std::vector<char>> buffers(4, std::vector<char>(3 * 4096));
  MrCache cache = provider.make(2);
  auto first = cache.acquire(buffers[0].data() + 4096, 10);
  cache.acquire(buffers[1].data() + 4096, 10);  // dropped at once: evictable
  cache.acquire(buffers[0].data() + 4096, 10);  // refresh 0
  cache.acquire(buffers[2].data() + 4096, 10);  // full: evicts 1, not the held and recent 0
  CHECK(cache.evictions() == 1);
  CHECK(cache.size() == 2);
  cache.acquire(buffers[0].data() + 4096, 10);
  CHECK(cache.misses() == 3);
  cache.acquire(buffers[1].data() + 4096, 10);
  CHECK(cache.misses() == 4);  // 1 had been evicted
  CHECK(provider.live.size() == cache.size());
}

TEST_CASE("capacity 0 registers per use and releases with the lease", "[mr]") {
  FakeProvider provider;
  std::vector<char> buffer(4096 * 2);
  MrCache cache = provider.make(0);
  {
    auto lease = cache.acquire(buffer.data(), 16);
    CHECK(provider.live.size() == 1);
  }
  CHECK(provider.live.empty());
  CHECK(cache.size() == 0);
}

TEST_CASE("an invalidated range is never handed out again and is deregistered once released", "[mr]") {
  int live = 0;  // registrations not yet deregistered
  MrCache cache(
      8,
      [&](uintptr_t, size_t) {
        ++live;
        return MrCache::Registration{};
      },
      [&](const MrCache::Registration&) { --live; });
  std::vector<char> a(4 * 4096), b(4 * 4096);
  auto held = cache.acquire(a.data() + 4096, 100);
  cache.acquire(b.data() + 4096, 100);  // unheld
  CHECK(live == 2);
  cache.invalidate(b.data(), b.size());  // freed memory, nobody holds it: gone at once
  CHECK(live == 1);
  cache.invalidate(a.data(), a.size());  // freed while a request still holds it: kept for that request only
  CHECK(live == 1);
  auto again = cache.acquire(a.data() + 4096, 100);  // memory mapped there anew: a fresh registration
  CHECK(again.get() != held.get());
  CHECK(cache.misses() == 3);
  CHECK(live == 2);
  held.reset();
  cache.acquire(b.data() + 4096, 10);  // the next acquire deregisters what was released, and registers b anew
  CHECK(live == 2);
  CHECK(cache.misses() == 4);
}
