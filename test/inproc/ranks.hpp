#pragma once
// N ranks as threads over one in-process fabric (transport/memory): the harness of the in-process tests.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "algo/algorithms.hpp"
#include "hiercoll/errors.hpp"
#include "transport/memory/memory_fabric.hpp"

namespace hiercoll::test {

using algo::Channel;
using transport::MemoryFabric;
using transport::MemoryFaults;

struct RankResult {
  std::string error;  // empty: the body returned
  bool timed_out = false;
  std::chrono::milliseconds took{0};
};

// Runs body(channel) on `n` ranks, one thread each, over one memory fabric; returns each rank's outcome.
// Small chunks and two slots make every algorithm pipeline even on short buffers.
inline std::vector<RankResult> run_ranks(int n, MemoryFaults faults, std::chrono::milliseconds timeout,
                                         const std::function<void(Channel&)>& body,
                                         const std::function<void(MemoryFabric&)>& meanwhile = {}) {
  MemoryFabric fabric(n, faults);
  std::vector<std::unique_ptr<transport::Endpoint>> endpoints;
  std::vector<std::vector<uint8_t>> addresses;
  for (int r = 0; r < n; ++r) {
    endpoints.push_back(fabric.endpoint(r));
    addresses.push_back(endpoints.back()->address());
  }
  std::vector<int> world(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) world[static_cast<size_t>(r)] = r;
  algo::AlgoConfig config;
  config.chunk_bytes = 256;
  config.slots = 2;
  std::vector<RankResult> results(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      RankResult& result = results[static_cast<size_t>(r)];
      auto start = algo::Clock::now();
      try {
        transport::Endpoint& endpoint = *endpoints[static_cast<size_t>(r)];
        endpoint.connect(r, addresses);
        algo::Scratch scratch;
        std::atomic<bool> aborted{false};
        Channel ch(endpoint, world, r, 7, 1, start + timeout, "test op", config, scratch, aborted);
        body(ch);
      } catch (const TimeoutError& e) {
        result.error = e.what();
        result.timed_out = true;
      } catch (const std::exception& e) {
        result.error = e.what();
      }
      result.took = std::chrono::duration_cast<std::chrono::milliseconds>(algo::Clock::now() - start);
    });
  }
  if (meanwhile) meanwhile(fabric);
  for (auto& t : threads) t.join();
  return results;
}

// Rank r's input element i: small integers, so sums in float32 are exact whatever the order.
inline float input(int rank, size_t i) {
  return static_cast<float>((rank * 7 + static_cast<int>(i % 13) * 3) % 17 - 8);
}

// Element i of the `n` ranks' inputs reduced with `op` (kSum or kMax): the serial reference. Exact in float32,
// the inputs being small integers.
inline float reduced_input(int n, size_t i, ReduceOp op) {
  float result = input(0, i);
  for (int r = 1; r < n; ++r) result = op == ReduceOp::kSum ? result + input(r, i) : std::max(result, input(r, i));
  return result;
}

inline MemoryFaults faults_for(int variant) {
  MemoryFaults f;
  f.seed = static_cast<uint64_t>(variant) + 11;
  if (variant == 1) f.max_delay = std::chrono::microseconds(300);
  if (variant == 2) {
    f.max_delay = std::chrono::microseconds(300);
    f.reorder = true;
  }
  return f;
}

inline void require_all_ok(const std::vector<RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    INFO("rank " << r << ": " << results[r].error);
    REQUIRE(results[r].error.empty());
  }
}

/// Runs `round(ch)` over and over on `n` ranks, messages delayed, and kills `victim` once every rank has started:
/// its messages are lost and its thread stops at its next round, as a dead process would. Every survivor must
/// raise TimeoutError within its deadline (1.5 s, plus a second's slack) naming the operation. Returns whether
/// one of them named the victim.
inline bool survivors_fail_after_kill(int n, int victim, const std::function<void(Channel&)>& round) {
  const auto deadline = std::chrono::milliseconds(1500);
  std::atomic<int> started{0};
  std::atomic<bool> killed{false};
  auto results = run_ranks(
      n, faults_for(1), deadline,
      [&](Channel& ch) {
        ++started;
        for (int repeat = 0; repeat < 1000; ++repeat) {  // keeps running until the kill
          if (ch.rank() == victim && killed.load()) throw std::runtime_error("killed");
          round(ch);
        }
      },
      [&](MemoryFabric& fabric) {
        while (started.load() < n) std::this_thread::yield();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        killed = true;
        fabric.kill(victim);
      });
  bool named = false;
  for (int r = 0; r < n; ++r) {
    const RankResult& result = results[static_cast<size_t>(r)];
    INFO("rank " << r << " (" << result.took.count() << " ms): " << result.error);
    REQUIRE_FALSE(result.error.empty());
    if (r == victim) continue;
    CHECK(result.timed_out);
    CHECK(result.took < deadline + std::chrono::seconds(1));
    CHECK_THAT(result.error, Catch::Contains("test op"));
    if (result.error.find("rank " + std::to_string(victim)) != std::string::npos) named = true;
  }
  return named;
}

}  // namespace hiercoll::test
