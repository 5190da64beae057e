#pragma once
// AdaptiveSpin: how long a waiting thread spins before it sleeps in the kernel, from how long its recent waits took.
// Spinning pays when the awaited event is microseconds away (a peer on the same node, a small message's reply), and
// only burns a core when it is not: a rank waiting for a late peer, or for the chunks of a large message on a slow
// link (each chunk about 0.5 ms at 1 Gbit/s: a 50 us spin per chunk cost 0.05 CPU-seconds per second, issue 32).
// So a thread spins its full budget while its waits have lately been short, and not at all once they have been long.
// One per waiting site and thread (thread_local): the progress thread's waits and a caller's are not alike.
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

class AdaptiveSpin {
 public:
  explicit constexpr AdaptiveSpin(std::chrono::microseconds full) : full_(full) {}

  /// How long the next wait should spin before it sleeps.
  std::chrono::microseconds budget() const {
    return typical_us_ < 4.0 * static_cast<double>(full_.count()) ? full_ : std::chrono::microseconds(0);
  }

  /// A wait's whole duration. A moving average (1/8 each), each wait counted as at most 1 ms, so that after one
  /// long wait a run of short ones brings the spin back within about 20 waits.
  void record(std::chrono::nanoseconds waited) {
    const double us = std::min(1000.0, std::chrono::duration<double, std::micro>(waited).count());
    typical_us_ += (us - typical_us_) / 8.0;
  }

 private:
  std::chrono::microseconds full_;
  double typical_us_ = 0;
};

}  // namespace hiercoll::base
