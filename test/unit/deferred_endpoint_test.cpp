// transport::DeferredEndpoint: an endpoint opened on a thread of its own after its owner went on (one-host jobs open
// the fabric after Communicator::create). What only looks after the endpoint never waits for it; what needs it waits,
// then works; an opening that failed fails every call that needs it, with its own error.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <vector>

#include "hiercoll/errors.hpp"
#include "transport/deferred_endpoint.hpp"
#include "transport/memory/memory_fabric.hpp"

using hiercoll::InvalidUsageError;
using hiercoll::transport::DeferredEndpoint;
using hiercoll::transport::Endpoint;
using hiercoll::transport::open_memory_endpoint;
using hiercoll::transport::Request;

namespace {

// Two ranks whose openers wait for `open` to be set, then exchange the addresses of two memory endpoints.
struct Pair {
  std::mutex mutex;
  std::condition_variable cv;
  bool open = false;
  std::vector<std::vector<uint8_t>> addresses{2};
  int published = 0;
  std::atomic<int> openings{0};

  DeferredEndpoint::Open opener(int rank) {
    return [this, rank] {
      ++openings;
      auto endpoint = open_memory_endpoint();
      std::unique_lock<std::mutex> lock(mutex);
      cv.wait(lock, [&] { return open; });
      addresses[static_cast<size_t>(rank)] = endpoint->address();
      ++published;
      cv.notify_all();
      cv.wait(lock, [&] { return published == 2; });
      lock.unlock();
      endpoint->connect(rank, addresses);
      return endpoint;
    };
  }
  void let_open() {
    std::lock_guard<std::mutex> lock(mutex);
    open = true;
    cv.notify_all();
  }
};

}  // namespace

TEST_CASE("a deferred endpoint: looking after it never waits for the opening; using it waits, then works",
          "[transport][deferred]") {
  Pair pair;
  DeferredEndpoint a(pair.opener(0)), b(pair.opener(1));
  a.start();
  b.start();
  int buffer = 0;
  // Held back by the openers: a call that waited for the opening would never return here.
  auto looked_after = std::async(std::launch::async, [&] {
    a.wake();
    a.cancel_all("nothing was posted");
    a.stats();
    a.quiesce(std::chrono::milliseconds(1));
    return a.pin(&buffer, sizeof(buffer)) == nullptr;
  });
  REQUIRE(looked_after.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  CHECK(looked_after.get());
  CHECK(a.ready() == nullptr);

  auto used = std::async(std::launch::async, [&] { return a.provider(); });
  CHECK(used.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout);  // waits for the opening
  pair.let_open();
  REQUIRE(used.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  CHECK(used.get() == "memory");
  Endpoint& opened = b.wait();  // before ready(): the operands of == have no order, and b may still be connecting
  CHECK(&opened == b.ready());

  int sent = 42, got = 0;
  auto receive = b.irecv(0, 7, 0, &got, sizeof(got));
  auto send = a.isend(1, 7, &sent, sizeof(sent));
  for (int i = 0; i < 1000 && !(receive->done() && send->done()); ++i) {
    a.progress(std::chrono::milliseconds(1));
    b.progress(std::chrono::milliseconds(1));
  }
  REQUIRE(receive->state.load() == Request::State::kDone);
  CHECK(got == 42);
  CHECK(pair.openings == 2);  // once per endpoint, whoever asked first
}

TEST_CASE("a deferred endpoint whose opening failed raises that error at every call that needs it",
          "[transport][deferred]") {
  std::atomic<int> openings{0};
  DeferredEndpoint endpoint([&]() -> std::unique_ptr<Endpoint> {
    ++openings;
    throw InvalidUsageError("no provider named 'bogus'");
  });
  // Nobody started it: the first call that needs it does.
  CHECK_THROWS_AS(endpoint.wait(), InvalidUsageError);
  int value = 1;
  CHECK_THROWS_WITH(endpoint.isend(0, 1, &value, sizeof(value)), Catch::Contains("bogus"));
  CHECK_THROWS_WITH(endpoint.progress(std::chrono::milliseconds(1)), Catch::Contains("bogus"));
  CHECK(endpoint.ready() == nullptr);
  endpoint.wake();  // still nothing to do, and no throw
  endpoint.cancel_all("closing");
  CHECK(openings == 1);
}
