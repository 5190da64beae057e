#include "base/log.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "base/settings.hpp"
#include "hiercoll/errors.hpp"
#include "hiercoll/hiercoll.h"

namespace hiercoll::base {
namespace {
std::atomic<int> g_log_rank{-1};

LogLevel read_level() {
  std::string value;
  try {
    value = process_settings().debug;
  } catch (const Error&) {
    return LogLevel::kWarn;  // a malformed HIERCOLL_DEBUG: logging must not throw; the communicator reports it
  }
  if (value == "INFO" || value == "DETAIL") return LogLevel::kInfo;  // DETAIL also turns on the mismatch check
  if (value == "TRACE") return LogLevel::kTrace;
  return LogLevel::kWarn;
}
}  // namespace

LogLevel log_level() {
  static const LogLevel level = read_level();
  return level;
}

void set_log_rank(int rank) { g_log_rank = rank; }

void log_line(LogLevel level, const std::string& message) {
  static const std::string host = [] {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    return std::string(name);
  }();
  const char* tag = level == LogLevel::kWarn ? "WARN" : level == LogLevel::kInfo ? "INFO" : "TRACE";
  // One fprintf per line so lines of concurrent ranks do not interleave mid-line.
  std::fprintf(stderr, "%s:%d [%d] HIERCOLL %s %s\n", host.c_str(), static_cast<int>(getpid()), g_log_rank.load(), tag,
               message.c_str());
}

}  // namespace hiercoll::base

// The C API's entry to the log (hiercoll.h): C, so that any binding can write through it, whatever C++ ABI it has.
extern "C" void hiercoll_log(hiercoll_log_level_t level, const char* message) {
  using hiercoll::base::LogLevel;
  const LogLevel wanted = level <= HIERCOLL_LOG_WARN ? LogLevel::kWarn
                          : level == HIERCOLL_LOG_INFO ? LogLevel::kInfo
                                                       : LogLevel::kTrace;
  if (hiercoll::base::log_level() >= wanted) hiercoll::base::log_line(wanted, message != nullptr ? message : "");
}
