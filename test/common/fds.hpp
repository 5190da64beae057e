#pragma once
// How many file descriptors this process has open: tests compare it before and after a failure, so a path that
// leaks a descriptor fails them.
#include <dirent.h>

namespace hiercoll::test {
inline int open_fds() {
  int count = 0;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (readdir(dir) != nullptr) ++count;
    closedir(dir);
  }
  return count;
}
}  // namespace hiercoll::test
