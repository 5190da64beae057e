// Multi-process tests: real ranks over the libfabric tcp provider on loopback, each checking its results
// against a serial reference (see mp_worker.cpp).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include "launcher.hpp"

using hiercoll::test::launch;
using hiercoll::test::LaunchOptions;

namespace {

LaunchOptions loopback(std::map<std::string, std::string> extra = {}) {
  LaunchOptions options;
  options.env = {{"HIERCOLL_FABRIC_PROVIDER", "tcp"}, {"HIERCOLL_FABRIC_IFACE", "lo"}, {"HIERCOLL_TIMEOUT_MS", "60000"}};
  for (auto& [k, v] : extra) options.env[k] = v;
  options.timeout = std::chrono::seconds(600);
  return options;
}

}  // namespace

TEST_CASE("allreduce equals the serial reference for every type and op", "[mp][allreduce]") {
  int ranks = GENERATE(1, 2, 3, 4, 5);
  std::string algo = GENERATE(std::string("auto"), std::string("ring"), std::string("rd"));
  if (ranks == 1 && algo != "auto") return;
  auto options = loopback();
  if (algo != "auto") options.env["HIERCOLL_ALGO"] = algo;
  // Small chunks so that even mid-size messages cross many pipeline chunks.
  options.env["HIERCOLL_CHUNK_BYTES"] = "64K";
  INFO("ranks " << ranks << " algo " << algo);
  auto result = launch(ranks, HIERCOLL_MP_WORKER, {"allreduce"}, options);
  INFO(result.report());
  CHECK(result.all_ok());
}

TEST_CASE("the other collectives equal the serial reference", "[mp][collectives]") {
  int ranks = GENERATE(1, 2, 3, 4, 5);
  INFO("ranks " << ranks);
  auto result = launch(ranks, HIERCOLL_MP_WORKER, {"collectives"}, loopback({{"HIERCOLL_CHUNK_BYTES", "16K"}}));
  INFO(result.report());
  CHECK(result.all_ok());
}

TEST_CASE("the TCP store bootstraps a communicator", "[mp][store]") {
  auto options = loopback();
  options.tcp_store = true;
  auto result = launch(4, HIERCOLL_MP_WORKER, {"hello"}, options);
  INFO(result.report());
  CHECK(result.all_ok());
}

TEST_CASE("bad input gives clear errors and leaves the communicator usable", "[mp][errors]") {
  auto result = launch(3, HIERCOLL_MP_WORKER, {"errors"}, loopback());
  INFO(result.report());
  CHECK(result.all_ok());
}

TEST_CASE("ranks that disagree on the count all get an error, none hangs", "[mp][errors]") {
  int ranks = GENERATE(2, 3);
  auto result = launch(ranks, HIERCOLL_MP_WORKER, {"mismatch"}, loopback({{"HIERCOLL_TIMEOUT_MS", "5000"}}));
  INFO(result.report());
  CHECK(result.all_ok());
  for (const auto& rank : result.ranks) CHECK(rank.output.find("EXPECTED ERROR") != std::string::npos);
}

TEST_CASE("a rank that never arrives is named in a timeout", "[mp][errors]") {
  auto options = loopback({{"HIERCOLL_TIMEOUT_MS", "3000"}});
  options.launch_only = 3;  // rank 3 of 4 never starts
  auto result = launch(4, HIERCOLL_MP_WORKER, {"hello"}, options);
  INFO(result.report());
  for (int r = 0; r < 3; ++r) {
    CHECK(result.ranks[r].exit_code == 3);
    CHECK(result.ranks[r].output.find("[timeout]") != std::string::npos);
    CHECK(result.ranks[r].output.find("rank(s) 3 of 4 never arrived") != std::string::npos);
  }
}
