#pragma once
// coarse_now(): the steady clock as of its last tick. Per-call bookkeeping of a small collective (its deadline,
// the flight recorder's times) needs milliseconds, not nanoseconds, and on some VMs a precise read is a vDSO call
// far slower than a coarse one (`git log -S coarse_now -- lib/base/clock.hpp` has the figures).
#include <chrono>
#include <ctime>

namespace hiercoll::base {

/// CLOCK_MONOTONIC_COARSE: the same clock as std::chrono::steady_clock (CLOCK_MONOTONIC) on Linux, read as of its
/// last tick (1-4 ms behind at most, the kernel's tick), so its times compare with steady_clock::now()'s.
inline std::chrono::steady_clock::time_point coarse_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::chrono::steady_clock::time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
}

}  // namespace hiercoll::base
