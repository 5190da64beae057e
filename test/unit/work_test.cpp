// Work's completion: waiting, callbacks (what the torch binding completes its futures from) and errors.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "engine/work_state.hpp"
#include "hiercoll/communicator.hpp"
#include "hiercoll/errors.hpp"

using namespace hiercoll;

TEST_CASE("completion callbacks run once each, in order, on the finishing thread or at once if done", "[work]") {
  auto state = std::make_shared<engine::WorkState>();
  Work work(state);
  std::vector<int> order;
  std::thread::id ran_on;
  work.on_completion([&] { order.push_back(1); });
  work.on_completion([&] {
    order.push_back(2);
    ran_on = std::this_thread::get_id();
    CHECK(work.is_completed());  // the state says done before any callback runs
  });
  CHECK(order.empty());
  std::thread finisher([&] { state->finish(); });
  const auto finisher_id = finisher.get_id();
  finisher.join();
  CHECK(order == std::vector<int>{1, 2});
  CHECK(ran_on == finisher_id);

  work.on_completion([&] { order.push_back(3); });  // already done: runs here, now
  CHECK(order == std::vector<int>{1, 2, 3});
  CHECK_NOTHROW(work.wait());
}

TEST_CASE("a callback sees the failure, and one that throws harms neither the finisher nor later ones", "[work]") {
  auto state = std::make_shared<engine::WorkState>();
  Work work(state);
  bool saw_error = false, later_ran = false;
  work.on_completion([&] { saw_error = work.error() != nullptr; });
  work.on_completion([] { throw std::runtime_error("a careless callback"); });
  work.on_completion([&] { later_ran = true; });
  REQUIRE_NOTHROW(state->finish(base::Failure{ErrorCode::kRemoteError, "rank 3 went away"}));
  CHECK(saw_error);
  CHECK(later_ran);
  CHECK_THROWS_AS(work.wait(), RemoteError);
}

TEST_CASE("callbacks added while another thread finishes the work each run exactly once", "[work]") {
  for (int round = 0; round < 200; ++round) {
    auto state = std::make_shared<engine::WorkState>();
    Work work(state);
    std::atomic<int> runs{0};
    std::thread finisher([&] { state->finish(); });
    for (int i = 0; i < 8; ++i) work.on_completion([&] { runs.fetch_add(1); });
    finisher.join();
    REQUIRE(runs.load() == 8);
  }
}

TEST_CASE("a default Work is complete and runs its callback at once", "[work]") {
  Work work;
  bool ran = false;
  work.on_completion([&] { ran = true; });
  CHECK(ran);
  CHECK(work.is_completed());
}

namespace {

// A device end that this test moves by hand: reached() reads a flag; watch() runs `then` on a thread of its own
// once the flag is up, as the CUDA watcher does; `fail` makes the device report an error instead.
struct FakeDeviceEnd final : engine::DeviceEnd {
  std::atomic<bool> there{false}, fail{false};
  std::atomic<int> watches{0}, queries{0};
  std::vector<std::thread> watchers;  // joined by the test, before its last reference goes
  bool reached() override {
    ++queries;
    if (fail) throw CudaError("the fake device failed");
    return there;
  }
  void watch(std::function<void(std::optional<base::Failure>)> then) override {
    ++watches;
    watchers.emplace_back([this, then = std::move(then)] {
      while (!there && !fail) std::this_thread::sleep_for(std::chrono::microseconds(50));
      then(fail ? std::optional<base::Failure>(base::Failure{ErrorCode::kCudaError, "the fake device failed"})
                : std::nullopt);
    });
  }
};

}  // namespace

TEST_CASE("a Work with a device end finishes when asked and the device got there, or through one watch", "[work]") {
  SECTION("polled by is_completed: finished by the asking thread, callbacks run once") {
    auto device = std::make_shared<FakeDeviceEnd>();
    auto state = std::make_shared<engine::WorkState>();
    state->device_end = device;
    Work work(state);
    CHECK_FALSE(work.is_completed());
    CHECK(device->queries == 1);
    device->there = true;
    CHECK(work.is_completed());
    CHECK(work.is_completed());
    CHECK(device->queries == 2);  // done is remembered: the device is not asked again
    CHECK(device->watches == 0);  // nobody waited: no watcher
    int runs = 0;
    work.on_completion([&] { ++runs; });
    CHECK(runs == 1);
  }
  SECTION("a callback on an unfinished Work asks for one watch, whose end runs it, even with the Work dropped") {
    auto device = std::make_shared<FakeDeviceEnd>();
    std::atomic<int> runs{0};
    {
      auto state = std::make_shared<engine::WorkState>();
      state->device_end = device;
      Work work(state);
      work.on_completion([&] { ++runs; });
      work.on_completion([&] { ++runs; });
      CHECK(device->watches == 1);
      CHECK_FALSE(work.wait_for(std::chrono::milliseconds(5)));
      CHECK(device->watches == 1);
    }
    CHECK(runs == 0);
    device->there = true;
    for (int i = 0; i < 10000 && runs < 2; ++i) std::this_thread::sleep_for(std::chrono::microseconds(100));
    CHECK(runs == 2);
    device->watchers.front().join();  // here: its end drops the state, which must not drop the last `device`
    device->watchers.clear();
  }
  SECTION("a poll and the watcher racing to finish it run every callback exactly once") {
    for (int round = 0; round < 100; ++round) {
      auto device = std::make_shared<FakeDeviceEnd>();
      auto state = std::make_shared<engine::WorkState>();
      state->device_end = device;
      Work work(state);
      std::atomic<int> runs{0};
      work.on_completion([&] { ++runs; });
      device->there = true;
      while (!work.is_completed()) {
      }
      work.synchronize();
      device->watchers.front().join();
      device->watchers.clear();
      REQUIRE(runs == 1);
    }
  }
  SECTION("a failing device fails the Work, through a poll or through the watcher") {
    auto polled = std::make_shared<FakeDeviceEnd>();
    auto state = std::make_shared<engine::WorkState>();
    state->device_end = polled;
    Work work(state);
    polled->fail = true;
    CHECK(work.is_completed());
    CHECK_THROWS_AS(work.synchronize(), CudaError);
    state->finish();  // a late finisher (the watcher) does not overwrite the first one's outcome
    CHECK_THROWS_AS(work.synchronize(), CudaError);

    auto watched = std::make_shared<FakeDeviceEnd>();
    auto other = std::make_shared<engine::WorkState>();
    other->device_end = watched;
    Work later(other);
    std::thread failer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      watched->fail = true;
    });
    CHECK_THROWS_AS(later.synchronize(std::chrono::seconds(30)), CudaError);
    failer.join();
    watched->watchers.front().join();
    watched->watchers.clear();
  }
}
