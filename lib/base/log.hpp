#pragma once
// HIERCOLL_DEBUG=WARN (default) | INFO | TRACE, printed to stderr as "host:pid [rank] HIERCOLL INFO ...".
#include <sstream>

namespace hiercoll::base {

enum class LogLevel { kWarn = 1, kInfo = 2, kTrace = 3 };

LogLevel log_level();
/// The rank shown in log lines of this process (set when a communicator is made).
void set_log_rank(int rank);
void log_line(LogLevel level, const std::string& message);

}  // namespace hiercoll::base

#define HIERCOLL_LOG(level, expr)                                                                \
  do {                                                                                           \
    if (::hiercoll::base::log_level() >= ::hiercoll::base::LogLevel::level) {                    \
      std::ostringstream hiercoll_log_stream_;                                                   \
      hiercoll_log_stream_ << expr;                                                              \
      ::hiercoll::base::log_line(::hiercoll::base::LogLevel::level, hiercoll_log_stream_.str()); \
    }                                                                                            \
  } while (0)
