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
    recorder.started(seq);
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
                                     "\"done\""));
  CHECK_THAT(json, Catch::Contains("\"seq\": 4, \"op\": \"op4\", \"state\": \"failed\""));
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
