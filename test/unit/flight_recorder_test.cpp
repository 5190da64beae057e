#include "engine/flight_recorder.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <string>

#include "hiercoll/store.hpp"

using namespace hiercoll;
using engine::FlightRecorder;

TEST_CASE("the flight recorder keeps the last collectives in order and counts completions", "[flight]") {
  FlightRecorder recorder(3);
  for (int i = 0; i < 5; ++i) {
    uint64_t seq = recorder.queued("op" + std::to_string(i));
    CHECK(seq == static_cast<uint64_t>(i));
    recorder.started(seq, i == 3);  // op3 by its caller, the others by the progress thread
    if (i < 4) recorder.ended(seq, true);
  }
  CHECK(recorder.called() == 5);
  CHECK(recorder.completed() == 4);
  auto entries = recorder.entries();
  REQUIRE(entries.size() == 3);  // the capacity: 2, 3, 4
  CHECK(entries[0].seq == 2);
  CHECK(entries[0].what == "op2");
  CHECK(entries[1].state == FlightRecorder::State::kDone);
  CHECK(entries[2].state == FlightRecorder::State::kRunning);
  CHECK(entries[2].started >= entries[2].queued);
  recorder.ended(4, false);
  CHECK(recorder.completed() == 4);  // a failure completes nothing
  CHECK(recorder.entries()[2].state == FlightRecorder::State::kFailed);
  recorder.ended(0, true);  // an entry already overwritten: nothing breaks
  std::string json = recorder.json("world#0", 1, 4);
  CHECK_THAT(json, Catch::StartsWith("{\"communicator\": \"world#0\", \"rank\": 1, \"size\": 4, \"called\": 5, "
                                     "\"completed\": 4, \"entries\": [{\"seq\": 2, \"op\": \"op2\", \"state\": "
                                     "\"done\", \"thread\": \"progress\""));
  CHECK_THAT(json, Catch::Contains("\"seq\": 3, \"op\": \"op3\", \"state\": \"done\", \"thread\": \"caller\""));
  CHECK_THAT(json, Catch::Contains("\"seq\": 4, \"op\": \"op4\", \"state\": \"failed\", \"thread\": \"progress\""));
}

// A collective its caller runs is kept as data (running()) and named only when the record is read: the same text
// the progress thread's entries carry, and its times on the wall clock like theirs.
TEST_CASE("a collective run by its caller is named and timed like a queued one when the record is read", "[flight]") {
  FlightRecorder recorder(4);
  const auto wall_before = std::chrono::system_clock::now();
  recorder.queued("broadcast(100 x float32) root 0 [chain]");
  engine::CollectiveName name;
  name.kind = algo::Kind::kAllreduce;
  name.count = 2;
  name.type = DataType::kFloat32;
  name.op = ReduceOp::kMax;
  name.algorithm = algo::Algorithm::kHierarchical;
  const uint64_t seq = recorder.running(name, FlightRecorder::Clock::now());
  CHECK(seq == 1);
  recorder.ended(seq, true);
  const auto wall_after = std::chrono::system_clock::now();
  auto entries = recorder.entries();
  REQUIRE(entries.size() == 2);
  std::string expected;
  engine::describe_into(expected, algo::Kind::kAllreduce, 2, DataType::kFloat32, ReduceOp::kMax, -1);
  CHECK(entries[1].what == expected + " [" + algo::to_string(algo::Algorithm::kHierarchical) + "]");
  CHECK(entries[1].state == FlightRecorder::State::kDone);
  CHECK(recorder.completed() == 2);
  for (const auto& e : entries) {  // a millisecond of slack for the clocks' offset, read once per entries()
    CHECK(e.queued >= wall_before - std::chrono::milliseconds(1));
    CHECK(e.ended >= e.started);
    CHECK(e.ended <= wall_after + std::chrono::milliseconds(1));
  }
  CHECK(entries[0].ended == std::chrono::system_clock::time_point{});  // never ended: no time
  const std::string json = recorder.json("world#0", 0, 2);
  CHECK_THAT(json, Catch::Contains("\"op\": \"" + entries[1].what + "\", \"state\": \"done\", \"thread\": \"caller\""));
  CHECK_THAT(json, Catch::Contains("\"state\": \"queued\", \"thread\": \"\""));  // not started: no thread
}

TEST_CASE("the flight recorder escapes operation names in its JSON", "[flight]") {
  FlightRecorder recorder(2);
  recorder.queued("a \"quoted\" \\ name\n");
  CHECK_THAT(recorder.json("c", 0, 1), Catch::Contains("\"op\": \"a \\\"quoted\\\" \\\\ name\\u000a\""));
}

TEST_CASE("after a timeout, ranks learn through the store who is behind, ahead or silent", "[flight]") {
  char dir[] = "/tmp/hiercoll-flight-unit-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  {
    FileStore store(dir, std::chrono::seconds(5), true);
    store.set("flight/1", std::string("41"));  // one collective behind rank 0
    store.set("flight/3", std::string("42"));  // level
    store.set("flight/4", std::string("43"));  // ahead
    auto start = std::chrono::steady_clock::now();
    std::string text = engine::who_is_behind(store, 0, 6, 42, std::chrono::milliseconds(200));
    auto took = std::chrono::steady_clock::now() - start;
    CHECK_THAT(text, Catch::Contains("behind this rank (42 collectives completed): rank 1 (41)"));
    CHECK_THAT(text, Catch::Contains("ahead of this rank (42 completed): rank 4 (43)"));
    CHECK_THAT(text, Catch::Contains("no answer from ranks 2, 5 within 200 ms"));
    CHECK(took >= std::chrono::milliseconds(200));  // waited the grace for the silent ones
    CHECK(took < std::chrono::seconds(3));
    CHECK(store.get_string("flight/0") == "42");  // and published its own count
    // Everyone level: nothing to say.
    CHECK(engine::who_is_behind(store, 0, 1, 42, std::chrono::milliseconds(10)).empty());
  }
}
