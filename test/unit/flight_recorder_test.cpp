#include "record/flight_recorder.hpp"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "hiercoll/store.hpp"

using namespace hiercoll;
using record::FlightRecorder;

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

// A collective its caller runs is kept as data (started_here()) and named only when the record is read: the same text
// the progress thread's entries carry, and its times on the wall clock like theirs.
TEST_CASE("a collective run by its caller is named and timed like a queued one when the record is read", "[flight]") {
  FlightRecorder recorder(4);
  const auto wall_before = std::chrono::system_clock::now();
  recorder.queued("broadcast(100 x float32) root 0 [chain]");
  record::CollectiveName name;
  name.kind = algo::Kind::kAllreduce;
  name.count = 2;
  name.type = DataType::kFloat32;
  name.op = ReduceOp::kMax;
  name.algorithm = algo::Algorithm::kHierarchical;
  const uint64_t seq = recorder.started_here(name, FlightRecorder::Clock::now());
  CHECK(seq == 1);
  recorder.ended_here(seq, true, FlightRecorder::Clock::now());
  const auto wall_after = std::chrono::system_clock::now();
  auto entries = recorder.entries();
  REQUIRE(entries.size() == 2);
  std::string expected;
  record::describe_into(expected, algo::Kind::kAllreduce, 2, DataType::kFloat32, ReduceOp::kMax, -1);
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

// Collectives their callers run and queued ones share one numbering and one capacity, kept in two places (the
// callers' without a lock): read back, they are one record in sequence.
TEST_CASE("callers' collectives and queued ones form one record, in order, of the last ones", "[flight]") {
  FlightRecorder recorder(4);
  record::CollectiveName name;
  name.kind = algo::Kind::kAllreduce;
  const auto now = FlightRecorder::Clock::now();
  std::vector<std::string> expected;  // by sequence number
  for (int i = 0; i < 9; ++i) {
    if (i % 3 == 0) {
      const uint64_t seq = recorder.queued("op" + std::to_string(i));
      CHECK(seq == static_cast<uint64_t>(i));
      recorder.started(seq, false);
      recorder.ended(seq, true);
      expected.push_back("op" + std::to_string(i));
    } else if (i == 4) {
      name.count = 1;
      recorder.issued(name, now);  // a one-rank device collective
      expected.emplace_back();
      record::describe_into(expected.back(), name);
    } else {
      name.count = static_cast<size_t>(100 + i);
      const uint64_t seq = recorder.started_here(name, now);
      CHECK(seq == static_cast<uint64_t>(i));
      if (i != 8) recorder.ended_here(seq, i != 7, now);
      expected.emplace_back();
      record::describe_into(expected.back(), name);
    }
  }
  CHECK(recorder.called() == 9);
  CHECK(recorder.completed() == 7);  // 0-6; 7 failed, 8 still runs
  const auto entries = recorder.entries();
  REQUIRE(entries.size() == 4);  // 5-8
  for (size_t k = 0; k < entries.size(); ++k) {
    CHECK(entries[k].seq == 5 + k);
    CHECK(entries[k].what == expected[5 + k]);
  }
  CHECK(entries[0].by_caller);  // started_here
  CHECK(!entries[1].by_caller);  // 6: queued, run by the progress thread
  CHECK(entries[1].state == FlightRecorder::State::kDone);
  CHECK(entries[2].state == FlightRecorder::State::kFailed);
  CHECK(entries[3].state == FlightRecorder::State::kRunning);
  CHECK(entries[3].ended == std::chrono::system_clock::time_point{});
}

// The callers' part has no lock: a reader racing the writer must still see each entry whole. The writer makes
// every field of collective n a function of n, so that a mix of two collectives shows. Most of its collectives
// come back to back, so that the reader meets the writer in the middle of one slot's update (a reader that did
// not check the version failed here within a second); every 16th pauses (a yield), so that the reader finds
// entries both running and done.
TEST_CASE("the flight record reads whole entries while a caller keeps writing them", "[flight]") {
  FlightRecorder recorder(2);
  std::atomic<bool> stop{false};
  uint64_t written = 0;
  std::thread writer([&] {
    record::CollectiveName name;
    name.kind = algo::Kind::kAllreduce;
    for (uint64_t n = 0; !stop.load(); ++n) {
      name.count = n;
      name.root = static_cast<int>(n % 1000);
      name.op = n % 2 ? ReduceOp::kMax : ReduceOp::kSum;
      const auto at = FlightRecorder::Clock::time_point(std::chrono::nanoseconds(1000 + n));
      const uint64_t seq = recorder.started_here(name, at);
      if (seq != n) break;  // checked below
      if (n % 16 == 0) std::this_thread::yield();
      recorder.ended_here(seq, true, at + std::chrono::nanoseconds(n));
      written = n + 1;
    }
  });
  struct Joined {  // also when a REQUIRE below throws
    std::atomic<bool>& stop;
    std::thread& thread;
    ~Joined() {
      stop = true;
      if (thread.joinable()) thread.join();
    }
  } joined{stop, writer};
  size_t running = 0, done = 0;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::steady_clock::now() - start; };
  while (elapsed() < std::chrono::milliseconds(500) ||
         ((running < 100 || done < 1000) && elapsed() < std::chrono::seconds(20))) {
    for (const auto& e : recorder.entries()) {
      std::string expected;
      record::describe_into(expected, algo::Kind::kAllreduce, e.seq, DataType::kFloat32,
                            e.seq % 2 ? ReduceOp::kMax : ReduceOp::kSum, static_cast<int>(e.seq % 1000));
      REQUIRE(e.what == expected + " [ring]");
      REQUIRE(e.by_caller);
      if (e.state == FlightRecorder::State::kDone) {
        REQUIRE(e.ended - e.started == std::chrono::nanoseconds(e.seq));
        ++done;
      } else {
        REQUIRE(e.state == FlightRecorder::State::kRunning);
        REQUIRE(e.ended == std::chrono::system_clock::time_point{});
        ++running;
      }
    }
  }
  stop = true;
  writer.join();
  CHECK(running >= 100);  // the reader met the writer mid-collective, not only between them
  CHECK(done >= 1000);
  CHECK(recorder.called() == written);
  CHECK(recorder.completed() == written);
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
    std::string text = record::who_is_behind(store, 0, 6, 42, std::chrono::milliseconds(200));
    auto took = std::chrono::steady_clock::now() - start;
    CHECK_THAT(text, Catch::Contains("behind this rank (42 collectives completed): rank 1 (41)"));
    CHECK_THAT(text, Catch::Contains("ahead of this rank (42 completed): rank 4 (43)"));
    CHECK_THAT(text, Catch::Contains("no answer from ranks 2, 5 within 200 ms"));
    CHECK(took >= std::chrono::milliseconds(200));  // waited the grace for the silent ones
    CHECK(took < std::chrono::seconds(3));
    CHECK(store.get_string("flight/0") == "42");  // and published its own count
    // Everyone level: nothing to say.
    CHECK(record::who_is_behind(store, 0, 1, 42, std::chrono::milliseconds(10)).empty());
  }
}
