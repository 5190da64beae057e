#pragma once
// Completion state shared between a Work handle and the progress thread that finishes it.
#include <condition_variable>
#include <exception>
#include <mutex>

namespace hiercoll::core {

struct WorkState {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::exception_ptr error;

  void finish(std::exception_ptr failure = nullptr) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
      error = std::move(failure);
    }
    done_cv.notify_all();
  }
};

}  // namespace hiercoll::core
