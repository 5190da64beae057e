// core_handover: the physical floor of a small allreduce between two ranks on one host. Two threads, pinned to two
// CPUs, pass one cache line back and forth; prints the one-way time (ns), the median of 7 rounds.
//
// A 2-rank allreduce of 8 B through shared memory needs each rank to see a line the other wrote, so it takes at least
// about two hand-overs. On a VM the figure also moves with where the host puts its vCPUs: sibling hyperthreads or
// cores that share a cache hand a line over in 25-45 ns, cores apart 250 ns and more (both seen on this project's
// 2-vCPU VM on one day). scripts/bench/bench-peers prints it beside each run, so a table's small-size column can be
// read against the machine it ran on.
//
//   core_handover [CPU_A CPU_B]   (default: the first two CPUs this process may run on)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "cpu_pair.hpp"

namespace {

using hiercoll::bench::Line;
using hiercoll::bench::pin;
using hiercoll::bench::relax;

// One round: `passes` round trips; the one-way time in ns.
double round_ns(int cpu_a, int cpu_b, long passes) {
  Line ping, pong;
  std::thread echo([&] {
    pin(cpu_b);
    for (long i = 1; i <= passes; ++i) {
      while (ping.value.load(std::memory_order_acquire) != i) relax();
      pong.value.store(i, std::memory_order_release);
    }
  });
  pin(cpu_a);
  // The echo thread may start late: the first pass is not timed.
  ping.value.store(1, std::memory_order_release);
  while (pong.value.load(std::memory_order_acquire) != 1) relax();
  const auto start = std::chrono::steady_clock::now();
  for (long i = 2; i <= passes; ++i) {
    ping.value.store(i, std::memory_order_release);
    while (pong.value.load(std::memory_order_acquire) != i) relax();
  }
  const auto end = std::chrono::steady_clock::now();
  echo.join();
  return std::chrono::duration<double, std::nano>(end - start).count() / static_cast<double>(2 * (passes - 1));
}

}  // namespace

int main(int argc, char** argv) {
  int cpu_a, cpu_b;
  if (!hiercoll::bench::cpu_pair(argc - 1, argv + 1, cpu_a, cpu_b)) {
    std::fprintf(stderr, "usage: core_handover [CPU_A CPU_B]\n");
    return 2;
  }
  if (cpu_a < 0 || cpu_b < 0 || cpu_a == cpu_b) {
    std::fprintf(stderr, "core_handover: needs two different CPUs (got %d and %d)\n", cpu_a, cpu_b);
    return 2;
  }
  std::vector<double> rounds;
  for (int r = 0; r < 7; ++r) rounds.push_back(round_ns(cpu_a, cpu_b, 200000));
  std::sort(rounds.begin(), rounds.end());
  std::printf("%.1f\n", rounds[rounds.size() / 2]);
  return 0;
}
