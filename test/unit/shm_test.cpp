#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <thread>

#include "hiercoll/errors.hpp"
#include "transport/shm/node_arena.hpp"
#include "transport/shm/shm_segment.hpp"

using namespace hiercoll;
using namespace hiercoll::transport;

namespace {
bool exists(const std::string& name) {
  int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd >= 0) close(fd);
  return fd >= 0;
}
}  // namespace

TEST_CASE("segments are shared, and unlinking keeps the mapping but removes the name", "[shm]") {
  ShmSegment owner = ShmSegment::create("unit-a", 1 << 16);
  ShmSegment peer = ShmSegment::attach(owner.name(), 1 << 16);
  std::memcpy(owner.data(), "hello", 6);
  CHECK(std::string(static_cast<char*>(peer.data())) == "hello");
  CHECK(exists(owner.name()));
  owner.unlink();
  CHECK_FALSE(exists(owner.name()));
  std::memcpy(peer.data(), "still", 6);
  CHECK(std::string(static_cast<char*>(owner.data())) == "still");
  CHECK_THROWS_AS(ShmSegment::attach(owner.name(), 16), SystemError);
}

TEST_CASE("the creator's destructor removes the name", "[shm]") {
  std::string name;
  {
    ShmSegment segment = ShmSegment::create("unit-b", 4096);
    name = segment.name();
    CHECK(exists(name));
  }
  CHECK_FALSE(exists(name));
}

TEST_CASE("segments of dead creators are swept", "[shm]") {
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);  // a pid that no longer runs
  std::string stale = "/hiercoll-" + std::to_string(child) + "-unit-stale";
  int fd = shm_open(stale.c_str(), O_CREAT | O_RDWR, 0600);
  REQUIRE(fd >= 0);
  close(fd);
  ShmSegment live = ShmSegment::create("unit-live", 4096);  // our own: must survive the sweep
  CHECK(sweep_stale_segments() >= 1);
  CHECK_FALSE(exists(stale));
  CHECK(exists(live.name()));
}

TEST_CASE("the arena barrier orders writes between ranks and times out naming the absent one", "[shm]") {
  auto first = NodeArena::create("unit-arena", 2, 2, 4096);
  auto second = NodeArena::attach(first->name(), 1, 2, 2, 4096);
  std::atomic<bool> aborted{false};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::atomic<int> other_wrong{0};  // Catch2 assertions are for the main thread only
  std::thread other([&] {
    for (int round = 0; round < 100; ++round) {
      std::memcpy(second->area(round, 1), &round, sizeof(round));
      second->barrier(deadline, "test", aborted);
      int seen;
      std::memcpy(&seen, second->area(round, 0), sizeof(seen));
      if (seen != round * 10) ++other_wrong;
      second->barrier(deadline, "test", aborted);
    }
  });
  for (int round = 0; round < 100; ++round) {
    int value = round * 10;
    std::memcpy(first->area(round, 0), &value, sizeof(value));
    first->barrier(deadline, "test", aborted);
    int seen;
    std::memcpy(&seen, first->area(round, 1), sizeof(seen));
    REQUIRE(seen == round);
    first->barrier(deadline, "test", aborted);
  }
  other.join();
  CHECK(other_wrong == 0);
  auto soon = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  CHECK_THROWS_WITH(first->barrier(soon, "allreduce", aborted), Catch::Contains("local rank 1"));
}
