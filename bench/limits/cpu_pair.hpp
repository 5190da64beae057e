#pragma once
// What the two-core limit tools (core_handover, shared_writes) share: which two CPUs they run on, pinning a thread
// there, a cache line of its own for the flag the two threads pass, and the spin hint while one waits.
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdlib>

namespace hiercoll::bench {

struct alignas(64) Line {
  std::atomic<long> value{0};
};

inline bool pin(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
}

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// The CPUs `args` names (two numbers), or with none the first two this process may run on (-1 where there is no
/// such CPU). False where `args` holds another count: the caller prints its usage. Whether the two are two
/// different CPUs is the caller's to check.
inline bool cpu_pair(int count, char** args, int& cpu_a, int& cpu_b) {
  cpu_a = cpu_b = -1;
  if (count == 2) {
    cpu_a = std::atoi(args[0]);
    cpu_b = std::atoi(args[1]);
  } else if (count == 0) {
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
      for (int c = 0; c < CPU_SETSIZE && cpu_b < 0; ++c) {
        if (!CPU_ISSET(c, &allowed)) continue;
        (cpu_a < 0 ? cpu_a : cpu_b) = c;
      }
    }
  } else {
    return false;
  }
  return true;
}

}  // namespace hiercoll::bench
