#include "topo/cpus.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>

namespace hiercoll::topo {

int cpus_for_local_ranks() {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int allowed = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  if (allowed > 1) return allowed;
  return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

}  // namespace hiercoll::topo
