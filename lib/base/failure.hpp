#pragma once
// An error as data, to carry from one thread to another. The exception object is made anew in the thread
// that rethrows it, so none is shared between threads (libstdc++'s exception_ptr reference counting is
// invisible to ThreadSanitizer and reads as a race).
#include <string>

#include "hiercoll/errors.hpp"

namespace hiercoll::base {

struct Failure {
  ErrorCode code;
  std::string message;
  static Failure of(const Error& e) { return {e.code(), e.what()}; }
};

/// Throws the hiercoll::Error subclass that matches `failure.code`.
[[noreturn]] void throw_failure(const Failure& failure);

}  // namespace hiercoll::base
