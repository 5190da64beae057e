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

/// For device work that no host thread finishes (a one-rank communicator's copy on the caller's stream): the
/// device itself says whether it got there. Never asked on a progress thread (reached() is a CUDA call; see
/// gpu/device_path.hpp for why a progress thread makes none).
struct DeviceEnd {
  virtual ~DeviceEnd() = default;
  /// Did the device get past the operation's work? Does not block. Throws hiercoll::Error if the device failed.
  virtual bool reached() = 0;
  /// Calls `then` once reached() would say so (with the failure, if the device failed), on a thread of its own.
  virtual void watch(std::function<void(std::optional<base::Failure>)> then) = 0;
};

struct WorkState {
  std::shared_ptr<StreamOrder> stream_order;  // set before the Work is handed out, then only read
  std::shared_ptr<DeviceEnd> device_end;      // likewise; set: nothing finishes this state unless asked
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::optional<base::Failure> failure;
  int source = -1;                               // receives: the sender's rank
  std::vector<std::function<void()>> callbacks;  // Work::on_completion's, until done
  bool watched = false;                          // device_end is watching for it

  /// Marks the operation done, wakes its waiters and runs its callbacks, on the calling (progress) thread. Only
  /// the first call counts: with a device_end, whoever notices first finishes it.
  void finish(std::optional<base::Failure> result = std::nullopt, int from = -1) {
    std::vector<std::function<void()>> to_run;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (done) return;
      done = true;
      failure = std::move(result);
      if (!failure) source = from;
      to_run.swap(callbacks);
    }
    done_cv.notify_all();
    for (auto& callback : to_run) run_callback(callback);
  }

  /// With a device_end and not done: asks the device now, and finishes if it got there. True if done.
  static bool poll_device(const std::shared_ptr<WorkState>& self);
  /// With a device_end and not done: has it watched (once), so that waiters and callbacks hear of the end.
  static void watch_device(const std::shared_ptr<WorkState>& self);

  /// A callback that throws must not take the progress thread with it: the error is logged and dropped.
  static void run_callback(const std::function<void()>& callback) noexcept;
};

}  // namespace hiercoll::engine
