// The flat algorithms on the in-process fabric (transport/memory): 1..64 emulated ranks as threads, each
// rank's output compared with a serial reference, with and without injected delays and reordering, and a
// killed rank making every survivor fail within its deadline.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ranks.hpp"
#include "values.hpp"

using namespace hiercoll;
using namespace hiercoll::test;

namespace {

const std::vector<int> kRankCounts = {1, 2, 3, 4, 5, 7, 8, 13, 16, 32, 64};
// Element counts: empty, one, fewer than ranks, not divisible, several chunks.
const std::vector<size_t> kCounts = {0, 1, 5, 97, 1000};

}  // namespace

using AllreduceFn = void (*)(Channel&, const void*, void*, size_t, DataType, ReduceOp);
struct NamedAllreduce {
  const char* name;
  AllreduceFn run;
};
const NamedAllreduce kAllreduces[] = {
    {"ring", algo::allreduce_ring}, {"rd", algo::allreduce_recursive_doubling}, {"sharded", algo::allreduce_sharded}};

TEST_CASE("allreduce (ring, recursive doubling, sharded) on 1..64 in-process ranks equals the serial sum", "[inproc]") {
  for (int variant = 0; variant < 3; ++variant) {
    for (int n : kRankCounts) {
      for (size_t count : kCounts) {
        if (variant > 0 && count > 97) continue;  // delays make long runs slow; short ones suffice for order
        for (const NamedAllreduce& algorithm : kAllreduces) {
          INFO("ranks " << n << ", count " << count << ", " << algorithm.name << ", faults " << variant);
          std::vector<std::vector<float>> out(static_cast<size_t>(n), std::vector<float>(count, -99.f));
          auto results = run_ranks(n, faults_for(variant), std::chrono::seconds(30), [&](Channel& ch) {
            std::vector<float> in(count);
            for (size_t i = 0; i < count; ++i) in[i] = input(ch.rank(), i);
            auto& mine = out[static_cast<size_t>(ch.rank())];
            algorithm.run(ch, in.data(), mine.data(), count, DataType::kFloat32, ReduceOp::kSum);
          });
          require_all_ok(results);
          for (size_t i = 0; i < count; ++i) {
            const float expected = reduced_input(n, i, ReduceOp::kSum);
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
        for (size_t i = 0; i < block; ++i)
          REQUIRE(scattered[rr][i] == reduced_input(n, rr * block + i, ReduceOp::kSum));
        for (size_t i = 0; i < total; ++i) {
          int owner = static_cast<int>(i / block);
          REQUIRE(gathered[rr][i] == input(owner, i));
          REQUIRE(broadcast[rr][i] == input(root, i));
          // alltoall: block q of rank r's output is block r of rank q's input
          REQUIRE(exchanged[rr][i] == input(owner, rr * block + i % block));
        }
      }
      for (size_t i = 0; i < total; ++i)
        REQUIRE(reduced[static_cast<size_t>(root)][i] == reduced_input(n, i, ReduceOp::kMax));
    }
  }
}

TEST_CASE("a rank killed mid-run makes every survivor fail within its deadline, naming a rank", "[inproc]") {
  for (int n : {3, 4, 8}) {
    for (const NamedAllreduce& algorithm : kAllreduces) {
      INFO("ranks " << n << ", " << algorithm.name);
      const int victim = n - 2;
      std::vector<float> in(4000, 1.f);
      const bool named = survivors_fail_after_kill(n, victim, [&](Channel& ch) {
        std::vector<float> out(in.size());
        algorithm.run(ch, in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum);
      });
      CHECK(named);
    }
  }
}

TEST_CASE("sharded allreduce: every type and op, in place and out of place, bit-identical on every rank",
          "[inproc][sharded]") {
  // Inputs whose exact results every type represents (test/common/values.hpp), messages delayed and reordered;
  // in place the first phase's sends and the second phase's receives share memory, which the algorithm orders.
  for (int n : {2, 3, 5, 8}) {
    for (DataType type : matrix_types()) {
      for (ReduceOp op : matrix_ops()) {
        if (op == ReduceOp::kAvg && !is_floating(type)) continue;
        for (bool in_place : {false, true}) {
          const size_t count = 1000 + static_cast<size_t>(n), elem = dtype_size(type);
          INFO("ranks " << n << ", " << to_string(type) << " " << to_string(op) << (in_place ? ", in place" : ""));
          std::vector<std::vector<uint8_t>> out(static_cast<size_t>(n), std::vector<uint8_t>(count * elem));
          auto results = run_ranks(n, faults_for(2), std::chrono::seconds(30), [&](Channel& ch) {
            std::vector<uint8_t> in(count * elem);
            for (size_t i = 0; i < count; ++i) put(type, in.data(), i, input_value(ch.rank(), i, type, op, 5));
            auto& mine = out[static_cast<size_t>(ch.rank())];
            if (in_place) mine = in;
            algo::allreduce_sharded(ch, in_place ? mine.data() : in.data(), mine.data(), count, type, op);
          });
          require_all_ok(results);
          for (size_t i = 0; i < count; ++i) {
            const double want = reference_value(n, i, type, op, 5), got = get(type, out[0].data(), i);
            if (std::fabs(got - want) > tolerance(type, op, want))
              FAIL("element " << i << ": " << got << ", want " << want);
          }
          for (int r = 1; r < n; ++r) REQUIRE(out[static_cast<size_t>(r)] == out[0]);
        }
      }
    }
  }
}

TEST_CASE("a ring allreduce of more than 65536 steps: the tags' 16-bit steps wrap and the sum stays right",
          "[inproc][wrap]") {
  // The tag keeps 16 bits of the step (algo/channel.cpp): two ranks with 64-element chunks number one step per
  // chunk of a half, so 2 x 64 x 66000 elements take 66000 steps in each phase, past the wrap.
  const int n = 2;
  const size_t count = 2 * 64 * 66000 + 13;
  std::vector<std::vector<float>> out(n, std::vector<float>(count, -99.f));
  auto results = run_ranks(n, faults_for(0), std::chrono::seconds(120), [&](Channel& ch) {
    std::vector<float> in(count);
    for (size_t i = 0; i < count; ++i) in[i] = input(ch.rank(), i);
    algo::allreduce_ring(ch, in.data(), out[static_cast<size_t>(ch.rank())].data(), count, DataType::kFloat32,
                         ReduceOp::kSum);
  });
  require_all_ok(results);
  for (size_t i = 0; i < count; ++i) {
    const float expected = reduced_input(n, i, ReduceOp::kSum);
    if (out[0][i] != expected || out[1][i] != expected) FAIL("element " << i << ": " << out[0][i] << ", " << out[1][i]);
  }
}
