// Single-process checks of the public API: a one-rank communicator, and input that must be refused
// before anything is sent.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "hiercoll/hiercoll.hpp"

using namespace hiercoll;

namespace {
std::shared_ptr<Store> fresh_store() {
  char pattern[] = "/tmp/hiercoll-comm-test-XXXXXX";
  REQUIRE(mkdtemp(pattern) != nullptr);
  return std::make_shared<FileStore>(pattern, std::chrono::seconds(10), /*remove_when_done=*/true);
}
CommOptions loopback() {
  CommOptions options;
  options.provider = "tcp";
  options.timeout = std::chrono::seconds(10);
  setenv("HIERCOLL_FABRIC_IFACE", "lo", 1);
  return options;
}
}  // namespace

TEST_CASE("a one-rank communicator runs every collective as a copy", "[comm]") {
  Communicator comm = Communicator::create(fresh_store(), 0, 1, loopback());
  CHECK(comm.layout().node_count == 1);
  std::vector<int32_t> in = {1, -2, 3}, out(3);
  comm.allreduce(in.data(), out.data(), 3, DataType::kInt32, ReduceOp::kMax).wait();
  CHECK(out == in);
  comm.reduce_scatter(in.data(), out.data(), 3, DataType::kInt32, ReduceOp::kSum).wait();
  CHECK(out == in);
  std::fill(out.begin(), out.end(), 0);
  comm.allgather(in.data(), out.data(), 3, DataType::kInt32).wait();
  CHECK(out == in);
  std::fill(out.begin(), out.end(), 0);
  comm.broadcast(in.data(), out.data(), 3, DataType::kInt32, 0).wait();
  CHECK(out == in);
  std::fill(out.begin(), out.end(), 0);
  comm.alltoall(in.data(), out.data(), 3, DataType::kInt32).wait();
  CHECK(out == in);
  std::fill(out.begin(), out.end(), 0);
  comm.reduce(in.data(), out.data(), 3, DataType::kInt32, ReduceOp::kSum, 0).wait();
  CHECK(out == in);
  comm.barrier().wait();

  // In place nothing changes; an average of one rank is the input, and the input is left as it was.
  std::vector<float> values = {1.5f, -2.25f, 3.0f}, reference = values, averaged(3);
  comm.allreduce(values.data(), values.data(), 3, DataType::kFloat32, ReduceOp::kSum).wait();
  CHECK(values == reference);
  comm.allreduce(values.data(), averaged.data(), 3, DataType::kFloat32, ReduceOp::kAvg).wait();
  CHECK(averaged == reference);
  CHECK(values == reference);
  // Each is in the record, done: these 9 and the start-up barrier.
  const std::string record = comm.flight_record();
  INFO(record);
  CHECK(record.find("\"called\": 10") != std::string::npos);
  CHECK(record.find("\"completed\": 10") != std::string::npos);
  CHECK(record.find("\"state\": \"failed\"") == std::string::npos);
  // Bad input is refused as on any communicator, and nothing is copied.
  CHECK_THROWS_AS(comm.allreduce(in.data(), out.data(), 3, DataType::kInt32, ReduceOp::kAvg), InvalidUsageError);
  // After abort() a collective fails rather than copying.
  comm.abort();
  std::fill(out.begin(), out.end(), 0);
  CHECK_THROWS(comm.allreduce(in.data(), out.data(), 3, DataType::kInt32, ReduceOp::kSum).wait());
  CHECK(out == std::vector<int32_t>(3, 0));
}

TEST_CASE("a provider that does not exist is a FabricError naming it", "[comm]") {
  CommOptions options = loopback();
  options.provider = "no-such-provider";
  try {
    Communicator::create(fresh_store(), 0, 1, options);
    FAIL("created a communicator on a missing provider");
  } catch (const FabricError& e) {
    CHECK(std::string(e.what()).find("no-such-provider") != std::string::npos);
    CHECK(e.code() == ErrorCode::kFabricError);
  }
}

TEST_CASE("an HIERCOLL_ALGO that names no algorithm fails the create, listing the names it takes", "[comm]") {
  setenv("HIERCOLL_ALGO", "tree", 1);
  std::string error;
  try {
    Communicator::create(fresh_store(), 0, 1, loopback());
  } catch (const InvalidUsageError& e) {
    error = e.what();
  }
  setenv("HIERCOLL_ALGO", "rd", 1);  // a name the table takes
  CHECK_NOTHROW(Communicator::create(fresh_store(), 0, 1, loopback()));
  unsetenv("HIERCOLL_ALGO");
  CHECK_THAT(error, Catch::Contains("HIERCOLL_ALGO='tree'") && Catch::Contains("ring, rd, hier, sharded"));
}

TEST_CASE("counts that overflow, bad ranks and bad options are refused up front", "[comm]") {
  Communicator comm = Communicator::create(fresh_store(), 0, 1, loopback());
  std::vector<float> a(4);
  CHECK_THROWS_WITH(comm.allreduce(a.data(), a.data(), SIZE_MAX / 2, DataType::kFloat32, ReduceOp::kSum),
                    Catch::Contains("overflows"));
  CHECK_THROWS_WITH(comm.allgather(a.data(), a.data(), SIZE_MAX / 4, DataType::kFloat64), Catch::Contains("overflows"));
  CHECK_THROWS_AS(comm.send(a.data(), 4, DataType::kFloat32, 0), InvalidUsageError);  // to itself
  CHECK_THROWS_WITH(Communicator::create(fresh_store(), 3, 2, loopback()), Catch::Contains("rank 3"));
  CHECK_THROWS_WITH(Communicator::create(nullptr, 0, 1, loopback()), Catch::Contains("store is null"));
  CommOptions zero = loopback();
  zero.timeout = std::chrono::milliseconds(0);
  CHECK_THROWS_WITH(Communicator::create(fresh_store(), 0, 1, zero), Catch::Contains("timeout"));
  // Still usable after all that.
  a = {1, 2, 3, 4};
  comm.allreduce(a.data(), a.data(), 4, DataType::kFloat32, ReduceOp::kAvg).wait();
  CHECK(a == std::vector<float>{1, 2, 3, 4});
}

TEST_CASE("an unreachable store is a clear timeout", "[comm]") {
  CHECK_THROWS_AS(open_store("tcp://127.0.0.1:1", 1, std::chrono::milliseconds(300)), TimeoutError);
}

TEST_CASE("HIERCOLL_TIMEOUT_MS replaces the timeout a program passes", "[comm]") {
  // Rank 1 of 2 never arrives: start-up ends at the environment's 300 ms, not the 10 minutes asked for.
  setenv("HIERCOLL_TIMEOUT_MS", "300", 1);
  CommOptions patient = loopback();
  patient.timeout = std::chrono::minutes(10);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(Communicator::create(fresh_store(), 0, 2, patient), Catch::Contains("within 300 ms"));
  unsetenv("HIERCOLL_TIMEOUT_MS");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}
