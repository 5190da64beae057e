#pragma once
// Completion state shared between a Work handle and the progress thread that finishes it.
//
// A failure is kept as (code, message), not as a std::exception_ptr: the exception object is made anew in
// the thread that waits, so no exception object is shared between threads (libstdc++'s exception_ptr
// reference counting is invisible to ThreadSanitizer and reads as a race).
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/failure.hpp"

namespace hiercoll::engine {

/// For operations on device buffers: how Work::wait() orders the caller's stream after the operation.
struct StreamOrder {
  virtual ~StreamOrder() = default;
  virtual void order_caller_stream() = 0;
};

struct WorkState {
  std::shared_ptr<StreamOrder> stream_order;  // set before the Work is handed out, then only read
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::optional<base::Failure> failure;
  int source = -1;                               // receives: the sender's rank
  std::vector<std::function<void()>> callbacks;  // Work::on_completion's, until done

  /// Marks the operation done, wakes its waiters and runs its callbacks, on the calling (progress) thread.
  void finish(std::optional<base::Failure> result = std::nullopt, int from = -1) {
    std::vector<std::function<void()>> to_run;
    {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
      failure = std::move(result);
      if (!failure) source = from;
      to_run.swap(callbacks);
    }
    done_cv.notify_all();
    for (auto& callback : to_run) run_callback(callback);
  }

  /// A callback that throws must not take the progress thread with it: the error is logged and dropped.
  static void run_callback(const std::function<void()>& callback) noexcept;
};

}  // namespace hiercoll::engine
