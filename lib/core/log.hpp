#pragma once
// HIERCOLL_DEBUG=WARN (default) | INFO | TRACE, printed to stderr as "host:pid [rank] HIERCOLL INFO ...".
#include <sstream>

namespace hiercoll::core {

enum class LogLevel { kWarn = 1, kInfo = 2, kTrace = 3 };

LogLevel log_level();
/// The rank shown in log lines of this process (set when a communicator is made).
void set_log_rank(int rank);
void log_line(LogLevel level, const std::string& message);

}  // namespace hiercoll::core

#define HIERCOLL_LOG(level, expr)                                                                \
  do {                                                                                           \
    if (::hiercoll::core::log_level() >= ::hiercoll::core::LogLevel::level) {                    \
      std::ostringstream hiercoll_log_stream_;                                                   \
      hiercoll_log_stream_ << expr;                                                              \
      ::hiercoll::core::log_line(::hiercoll::core::LogLevel::level, hiercoll_log_stream_.str()); \
    }                                                                                            \
  } while (0)
