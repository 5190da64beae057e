#pragma once
// Every collective of a communicator on one rank, against a serial reference computed another way: small-integer
// inputs make every sum exact in float32 up to thousands of ranks. Shared by the scale tests that run ranks as
// threads (test/scale/thread_ranks.cpp) and as processes (test/mp/mp_worker.cpp, scenario "scale").
#include <hiercoll/communicator.hpp>

#include <chrono>
#include <climits>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace hiercoll::test::scale {

using Clock = std::chrono::steady_clock;

// Inputs: small integers, so that every sum over 2,048 ranks is exact in float32 and the reference is exact.
inline float value(int rank, size_t i) { return static_cast<float>(static_cast<int>((rank * 7 + i * 3) % 13) - 6); }
inline int32_t ivalue(int rank, size_t i) { return static_cast<int32_t>((rank * 31 + i * 17) % 1009); }

// Serial references, computed once on the main thread, read by every rank.
struct Reference {
  std::vector<float> sum;             // allreduce of value() over all ranks, count elements
  std::vector<float> scattered;       // reduce-scatter of value() over all ranks, ranks * kScatter elements
  std::vector<int32_t> max;           // reduce (max) of ivalue(), kReduce elements
  static constexpr size_t kScatter = 3, kGather = 2, kReduce = 5, kSmall = 7;
};

inline Reference make_reference(int ranks, size_t count) {
  Reference ref;
  ref.sum.assign(count, 0.0f);
  ref.scattered.assign(static_cast<size_t>(ranks) * Reference::kScatter, 0.0f);
  ref.max.assign(Reference::kReduce, INT32_MIN);
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < count; ++i) ref.sum[i] += value(r, i);
    for (size_t i = 0; i < ref.scattered.size(); ++i) ref.scattered[i] += value(r, i);
    for (size_t i = 0; i < Reference::kReduce; ++i) ref.max[i] = std::max(ref.max[i], ivalue(r, i));
  }
  return ref;
}

// The first wrong element of any rank ends the run with its description.
struct Verdict {
  std::mutex mutex;
  std::string first_failure;
  void fail(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex);
    if (first_failure.empty()) first_failure = what;
  }
  bool failed() {
    std::lock_guard<std::mutex> lock(mutex);
    return !first_failure.empty();
  }
};

template <typename T>
void expect_equal(Verdict& verdict, int rank, const char* what, const std::vector<T>& got, size_t i, T want) {
  if (got[i] != want) {
    std::ostringstream text;
    text << what << ": rank " << rank << " element " << i << " is " << got[i] << ", want " << want;
    verdict.fail(text.str());
  }
}

// How long each step of run_collectives took on one rank, in order.
using Steps = std::vector<std::pair<std::string, double>>;

// Every collective on one rank, checked against the reference.
inline void run_collectives(Communicator& comm, const Reference& ref, size_t count, Verdict& verdict, Steps& steps) {
  const int me = comm.rank(), n = comm.size();
  auto last = Clock::now();
  auto step = [&](const char* name) {
    const auto now = Clock::now();
    steps.emplace_back(name, std::chrono::duration<double, std::milli>(now - last).count());
    last = now;
  };
  std::vector<float> in(count), out(count);
  for (size_t i = 0; i < count; ++i) in[i] = value(me, i);

  // Allreduce: a small message (latency-bound schedules) and a large one (bandwidth-bound), then in place.
  comm.allreduce(in.data(), out.data(), Reference::kSmall, DataType::kFloat32, ReduceOp::kSum).wait();
  for (size_t i = 0; i < Reference::kSmall; ++i) expect_equal(verdict, me, "allreduce (small)", out, i, ref.sum[i]);
  step("allreduce small");
  comm.allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum).wait();
  for (size_t i = 0; i < count; ++i) expect_equal(verdict, me, "allreduce", out, i, ref.sum[i]);
  step("allreduce");
  std::vector<float> inplace = in;
  comm.allreduce(inplace.data(), inplace.data(), count, DataType::kFloat32, ReduceOp::kSum).wait();
  for (size_t i = 0; i < count; ++i) expect_equal(verdict, me, "allreduce (in place)", inplace, i, ref.sum[i]);
  step("allreduce in place");

  // Reduce-scatter: rank r gets elements [r*c, (r+1)*c) of the sum.
  const size_t c = Reference::kScatter;
  std::vector<float> rs_in(static_cast<size_t>(n) * c), rs_out(c);
  for (size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = value(me, i);
  comm.reduce_scatter(rs_in.data(), rs_out.data(), c, DataType::kFloat32, ReduceOp::kSum).wait();
  for (size_t j = 0; j < c; ++j)
    expect_equal(verdict, me, "reduce_scatter", rs_out, j, ref.scattered[static_cast<size_t>(me) * c + j]);
  step("reduce_scatter");

  // Allgather: block q is rank q's input.
  const size_t g = Reference::kGather;
  std::vector<int32_t> ag_in(g), ag_out(static_cast<size_t>(n) * g);
  for (size_t j = 0; j < g; ++j) ag_in[j] = ivalue(me, j);
  comm.allgather(ag_in.data(), ag_out.data(), g, DataType::kInt32).wait();
  for (int q = 0; q < n; ++q)
    for (size_t j = 0; j < g; ++j) expect_equal(verdict, me, "allgather", ag_out, static_cast<size_t>(q) * g + j, ivalue(q, j));
  step("allgather");

  // Broadcast from a rank that is neither first nor last of its node.
  const int root = (n / 2 + 1) % n;
  std::vector<float> bc(count, -1.0f);
  if (me == root) bc = in;
  comm.broadcast(bc.data(), bc.data(), count, DataType::kFloat32, root).wait();
  for (size_t i = 0; i < count; ++i) expect_equal(verdict, me, "broadcast", bc, i, value(root, i));
  step("broadcast");

  // Reduce (max) to the last rank; the others' output is not written.
  std::vector<int32_t> rd_in(Reference::kReduce), rd_out(Reference::kReduce, -1);
  for (size_t i = 0; i < rd_in.size(); ++i) rd_in[i] = ivalue(me, i);
  comm.reduce(rd_in.data(), rd_out.data(), rd_in.size(), DataType::kInt32, ReduceOp::kMax, n - 1).wait();
  for (size_t i = 0; i < rd_out.size(); ++i)
    expect_equal(verdict, me, "reduce", rd_out, i, me == n - 1 ? ref.max[i] : int32_t{-1});
  step("reduce");

  // Alltoall: block j of rank i's input is i * n + j.
  std::vector<int32_t> a2a_in(static_cast<size_t>(n)), a2a_out(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) a2a_in[static_cast<size_t>(j)] = me * n + j;
  comm.alltoall(a2a_in.data(), a2a_out.data(), 1, DataType::kInt32).wait();
  for (int i = 0; i < n; ++i) expect_equal(verdict, me, "alltoall", a2a_out, static_cast<size_t>(i), i * n + me);
  step("alltoall");

  // Point to point around the ring, then a barrier.
  std::vector<int32_t> token{me}, got{-1};
  auto sent = comm.send(token.data(), 1, DataType::kInt32, (me + 1) % n, 5);
  comm.recv(got.data(), 1, DataType::kInt32, (me + n - 1) % n, 5).wait();
  sent.wait();
  expect_equal(verdict, me, "send/recv", got, 0, (me + n - 1) % n);
  step("send/recv");
  comm.barrier().wait();
  step("barrier");
}


}  // namespace hiercoll::test::scale
