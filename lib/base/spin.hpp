#pragma once
// AdaptiveSpin: how long a waiting thread spins before it sleeps in the kernel, from how long its recent waits took.
// Spinning pays when the awaited event is microseconds away (a peer on the same node, a small message's reply), and
// only burns a core when it is not: a rank waiting for a late peer, or for the chunks of a large message on a slow
// link (a spin per chunk there costs CPU-seconds per second of waiting: docs/benchmarks.md, "What waiting costs").
// So a thread spins its full budget while its waits have lately been short, and not at all once they have been long.
// One per waiting site and thread (thread_local): the progress thread's waits and a caller's are not alike.
//
// A site may let the spin stretch, up to twice its typical wait, to at most `longest`. Two ranks that wait on each
// other in turn and both sleep stay asleep: each signal must wake its peer, which takes the kernel (on a VM's idle
// vCPU) a wake-up, so every wait lasts that long and a spin shorter than that never catches one. A spin longer
// than the typical wait lets the next signal find its waiter awake.
#include <algorithm>
#include <chrono>

namespace hiercoll::base {

/// The CPU's spin-wait hint: a poll loop that runs it leaves the core's other hardware thread its share and does not
/// flood the memory system with speculative loads of the watched line.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// How long a spinning wait polls before it starts yielding the core at each poll: a peer's signal often comes
/// within it, and noticing it between sched_yield calls costs a system call more; past it, a peer that
/// shares the core (more ranks than cores, or the scheduler's doing) gets it.
inline constexpr std::chrono::microseconds kPollOnly{4};

class AdaptiveSpin {
 public:
  explicit constexpr AdaptiveSpin(std::chrono::microseconds full) : AdaptiveSpin(full, full) {}
  constexpr AdaptiveSpin(std::chrono::microseconds full, std::chrono::microseconds longest)
      : full_(static_cast<double>(full.count())), longest_(static_cast<double>(longest.count())) {}

  /// How long the next wait should spin before it sleeps: none once waits have been long (at least 4 full spins and
  /// twice the longest), else twice the typical wait within [full, longest].
  std::chrono::microseconds budget() const {
    if (typical_us_ >= std::max(4.0 * full_, 2.0 * longest_)) return std::chrono::microseconds(0);
    return std::chrono::microseconds(static_cast<long>(std::clamp(2.0 * typical_us_, full_, longest_)));
  }

  /// A wait's whole duration. A moving average (1/8 each), each wait counted as at most 1 ms, so that after one
  /// long wait a run of short ones brings the spin back within about 20 waits.
  void record(std::chrono::nanoseconds waited) {
    const double us = std::min(1000.0, std::chrono::duration<double, std::micro>(waited).count());
    typical_us_ += (us - typical_us_) / 8.0;
  }

 private:
  double full_, longest_;  // us
  double typical_us_ = 0;
};

}  // namespace hiercoll::base
