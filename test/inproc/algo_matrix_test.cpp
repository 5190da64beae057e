// The flat algorithms on the in-process fabric (transport/memory): 1..64 emulated ranks as threads, each
// rank's output compared with a serial reference, with and without injected delays and reordering, and a
// killed rank making every survivor fail within its deadline.
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

using namespace hiercoll;
using algo::Channel;
using transport::MemoryFabric;
using transport::MemoryFaults;

namespace {

struct RankResult {
  std::string error;  // empty: the body returned
  bool timed_out = false;
  std::chrono::milliseconds took{0};
};

// Runs body(channel) on `n` ranks, one thread each, over one memory fabric; returns each rank's outcome.
// Small chunks and two slots make every algorithm pipeline even on short buffers.
std::vector<RankResult> run_ranks(int n, MemoryFaults faults, std::chrono::milliseconds timeout,
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
float input(int rank, size_t i) { return static_cast<float>((rank * 7 + static_cast<int>(i % 13) * 3) % 17 - 8); }

const std::vector<int> kRankCounts = {1, 2, 3, 4, 5, 7, 8, 13, 16, 32, 64};
// Element counts: empty, one, fewer than ranks, not divisible, several chunks.
const std::vector<size_t> kCounts = {0, 1, 5, 97, 1000};

MemoryFaults faults_for(int variant) {
  MemoryFaults f;
  f.seed = static_cast<uint64_t>(variant) + 11;
  if (variant == 1) f.max_delay = std::chrono::microseconds(300);
  if (variant == 2) {
    f.max_delay = std::chrono::microseconds(300);
    f.reorder = true;
  }
  return f;
}

void require_all_ok(const std::vector<RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    INFO("rank " << r << ": " << results[r].error);
    REQUIRE(results[r].error.empty());
  }
}

}  // namespace

TEST_CASE("allreduce (ring, recursive doubling) on 1..64 in-process ranks equals the serial sum", "[inproc]") {
  for (int variant = 0; variant < 3; ++variant) {
    for (int n : kRankCounts) {
      for (size_t count : kCounts) {
        if (variant > 0 && count > 97) continue;  // delays make long runs slow; short ones suffice for order
        for (bool ring : {true, false}) {
          INFO("ranks " << n << ", count " << count << ", " << (ring ? "ring" : "rd") << ", faults " << variant);
          std::vector<std::vector<float>> out(static_cast<size_t>(n), std::vector<float>(count, -99.f));
          auto results = run_ranks(n, faults_for(variant), std::chrono::seconds(30), [&](Channel& ch) {
            std::vector<float> in(count);
            for (size_t i = 0; i < count; ++i) in[i] = input(ch.rank(), i);
            auto& mine = out[static_cast<size_t>(ch.rank())];
            if (ring) algo::allreduce_ring(ch, in.data(), mine.data(), count, DataType::kFloat32, ReduceOp::kSum);
            else algo::allreduce_recursive_doubling(ch, in.data(), mine.data(), count, DataType::kFloat32, ReduceOp::kSum);
          });
          require_all_ok(results);
          for (size_t i = 0; i < count; ++i) {
            float expected = 0;
            for (int r = 0; r < n; ++r) expected += input(r, i);
            for (int r = 0; r < n; ++r) REQUIRE(out[static_cast<size_t>(r)][i] == expected);
          }
        }
      }
    }
  }
}

TEST_CASE("reduce-scatter, allgather, broadcast, reduce, alltoall, barrier on in-process ranks", "[inproc]") {
  for (int variant = 0; variant < 3; ++variant) {
    for (int n : kRankCounts) {
      const size_t block = variant == 0 ? 150 : 9;  // elements per rank
      const size_t total = block * static_cast<size_t>(n);
      const int root = n / 2;
      INFO("ranks " << n << ", block " << block << ", faults " << variant);
      std::vector<std::vector<float>> scattered(static_cast<size_t>(n)), gathered(static_cast<size_t>(n)),
          broadcast(static_cast<size_t>(n)), reduced(static_cast<size_t>(n)), exchanged(static_cast<size_t>(n));
      auto results = run_ranks(n, faults_for(variant), std::chrono::seconds(30), [&](Channel& ch) {
        const size_t r = static_cast<size_t>(ch.rank());
        std::vector<float> in(total);
        for (size_t i = 0; i < total; ++i) in[i] = input(ch.rank(), i);
        scattered[r].assign(block, 0);
        algo::reduce_scatter_ring(ch, in.data(), scattered[r].data(), block, DataType::kFloat32, ReduceOp::kSum);
        gathered[r].assign(total, 0);
        algo::allgather_ring(ch, in.data() + r * block, gathered[r].data(), block, DataType::kFloat32);
        broadcast[r].assign(total, 0);
        algo::broadcast_chain(ch, in.data(), broadcast[r].data(), total * sizeof(float), root);
        reduced[r].assign(total, 0);
        algo::reduce_chain(ch, in.data(), reduced[r].data(), total, DataType::kFloat32, ReduceOp::kMax, root);
        exchanged[r].assign(total, 0);
        algo::alltoall_pairwise(ch, in.data(), exchanged[r].data(), block * sizeof(float));
        algo::barrier_dissemination(ch);
      });
      require_all_ok(results);
      for (int r = 0; r < n; ++r) {
        const size_t rr = static_cast<size_t>(r);
        for (size_t i = 0; i < block; ++i) {
          float sum = 0;
          for (int q = 0; q < n; ++q) sum += input(q, rr * block + i);
          REQUIRE(scattered[rr][i] == sum);
        }
        for (size_t i = 0; i < total; ++i) {
          int owner = static_cast<int>(i / block);
          REQUIRE(gathered[rr][i] == input(owner, i));
          REQUIRE(broadcast[rr][i] == input(root, i));
          // alltoall: block q of rank r's output is block r of rank q's input
          REQUIRE(exchanged[rr][i] == input(owner, rr * block + i % block));
        }
      }
      for (size_t i = 0; i < total; ++i) {
        float max = input(0, i);
        for (int q = 1; q < n; ++q) max = std::max(max, input(q, i));
        REQUIRE(reduced[static_cast<size_t>(root)][i] == max);
      }
    }
  }
}

TEST_CASE("a rank killed mid-run makes every survivor fail within its deadline, naming a rank", "[inproc]") {
  for (int n : {3, 4, 8}) {
    for (bool ring : {true, false}) {
      INFO("ranks " << n << ", " << (ring ? "ring" : "rd"));
      const int victim = n - 2;
      const size_t count = 4000;
      std::atomic<int> started{0};
      auto results = run_ranks(
          n, faults_for(1), std::chrono::milliseconds(1500),
          [&](Channel& ch) {
            std::vector<float> in(count, 1.f), out(count);
            ++started;
            for (int repeat = 0; repeat < 1000; ++repeat) {  // keeps running until the kill
              if (ring) algo::allreduce_ring(ch, in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
              else algo::allreduce_recursive_doubling(ch, in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
            }
          },
          [&](MemoryFabric& fabric) {
            while (started.load() < n) std::this_thread::yield();
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            fabric.kill(victim);
          });
      bool someone_names_victim = false;
      for (int r = 0; r < n; ++r) {
        const RankResult& result = results[static_cast<size_t>(r)];
        INFO("rank " << r << " (" << result.took.count() << " ms): " << result.error);
        REQUIRE_FALSE(result.error.empty());
        if (r == victim) continue;
        CHECK(result.timed_out);
        CHECK(result.took < std::chrono::milliseconds(1500 + 1000));
        CHECK_THAT(result.error, Catch::Contains("test op"));
        if (result.error.find("rank " + std::to_string(victim)) != std::string::npos) someone_names_victim = true;
      }
      CHECK(someone_names_victim);
    }
  }
}
