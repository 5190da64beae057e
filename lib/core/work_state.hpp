#pragma once
// Completion state shared between a Work handle and the progress thread that finishes it.
//
// A failure is kept as (code, message), not as a std::exception_ptr: the exception object is made anew in
// the thread that waits, so no exception object is shared between threads (libstdc++'s exception_ptr
// reference counting is invisible to ThreadSanitizer and reads as a race).
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <string>

#include "core/failure.hpp"

namespace hiercoll::core {

struct WorkState {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::optional<Failure> failure;

  void finish(std::optional<Failure> result = std::nullopt) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
      failure = std::move(result);
    }
    done_cv.notify_all();
  }
};

}  // namespace hiercoll::core
