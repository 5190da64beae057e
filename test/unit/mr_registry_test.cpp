#include "transport/mr_registry.hpp"

#include <catch2/catch.hpp>
#include <sys/mman.h>
#include <unistd.h>

#include <map>
#include <vector>

using hiercoll::transport::MrRegistry;

namespace {
// A fake provider that counts live registrations.
struct FakeProvider {
  std::map<uintptr_t, size_t> live;
  int registrations = 0;
  MrRegistry make() {
    return MrRegistry(
        [this](uintptr_t begin, size_t length) {
          ++registrations;
          live[begin] = length;
          MrRegistry::Registration reg;
          reg.descriptor = reinterpret_cast<void*>(begin);
          return reg;
        },
        [this](const MrRegistry::Registration& reg) { live.erase(reinterpret_cast<uintptr_t>(reg.descriptor)); });
  }
};
}  // namespace

TEST_CASE("a registration serves any range inside it while it is held", "[mr]") {
  FakeProvider provider;
  std::vector<char> buffer(1 << 20);
  MrRegistry registry = provider.make();
  {
    auto whole = registry.acquire(buffer.data(), buffer.size());
    auto part = registry.acquire(buffer.data() + 4096, 100);
    CHECK(whole.get() == part.get());
    CHECK(registry.reuses() == 1);
    CHECK(registry.registrations() == 1);
    CHECK(provider.registrations == 1);
    CHECK(whole->begin <= reinterpret_cast<uintptr_t>(buffer.data()));
    CHECK(whole->end >= reinterpret_cast<uintptr_t>(buffer.data() + buffer.size()));
    CHECK(registry.live() == 1);
  }
  CHECK(provider.live.empty());  // the last lease dropped: deregistered
  CHECK(registry.live() == 0);
  auto again = registry.acquire(buffer.data() + 4096, 100);  // nothing kept: registered afresh
  CHECK(provider.registrations == 2);
}

TEST_CASE("a lease outliving the registry still deregisters", "[mr]") {
  FakeProvider provider;
  std::vector<char> buffer(4096 * 2);
  MrRegistry::Lease lease;
  {
    MrRegistry registry = provider.make();
    lease = registry.acquire(buffer.data(), 16);
  }
  CHECK(provider.live.size() == 1);
  lease.reset();
  CHECK(provider.live.empty());
}

// The pages behind an address change when the caller unmaps and maps again: once the first operation's leases are
// gone, the second gets a registration of its own, never the first one's (which would name the old pages).
TEST_CASE("memory unmapped and mapped again at the same address gets a new registration", "[mr]") {
  FakeProvider provider;
  MrRegistry registry = provider.make();
  const size_t bytes = 16 * static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* first = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(first != MAP_FAILED);
  const void* first_registration = nullptr;
  {
    auto operation = registry.acquire(first, bytes);
    first_registration = operation.get();
    auto message = registry.acquire(static_cast<char*>(first) + 4096, 4096);
    CHECK(message.get() == operation.get());
  }
  REQUIRE(munmap(first, bytes) == 0);
  void* second = mmap(first, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  REQUIRE(second == first);
  auto operation = registry.acquire(second, bytes);
  CHECK(registry.registrations() == 2);
  CHECK(provider.live.size() == 1);
  (void)first_registration;
  munmap(second, bytes);
}
