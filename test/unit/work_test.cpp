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
