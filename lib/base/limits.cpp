#include "base/limits.hpp"

#include <sys/resource.h>

#include <mutex>

#include "base/log.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::base {

size_t raise_descriptor_limit() {
  static std::once_flag once;
  std::call_once(once, [] {
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
    const rlim_t before = limit.rlim_cur;
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) == 0) {
      HIERCOLL_LOG(kInfo, "raised the open-file limit (RLIMIT_NOFILE) from " << before << " to " << limit.rlim_cur);
    }
  });
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  return limit.rlim_cur == RLIM_INFINITY ? static_cast<size_t>(-1) : static_cast<size_t>(limit.rlim_cur);
}

void require_descriptors(size_t needed, const std::string& why) {
  const size_t have = raise_descriptor_limit();
  if (have == 0 || have >= needed) return;
  throw SystemError("the open-file limit (RLIMIT_NOFILE) is " + std::to_string(have) + " even raised to its hard " +
                    "limit; " + why + " needs about " + std::to_string(needed) +
                    ": raise the hard limit (ulimit -Hn " + std::to_string(needed) +
                    ", or LimitNOFILE / nofile in the launcher's or container's configuration)");
}

}  // namespace hiercoll::base
