#pragma once
// BackgroundWorker: one helper thread that runs one job at a time for the progress thread, so a
// pipelined algorithm can overlap a network phase with shared-memory work. While a job runs, the
// caller must not touch what the job uses (e.g. the endpoint): the job owns it until wait() returns.
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "base/failure.hpp"

namespace hiercoll::algo {

class BackgroundWorker {
 public:
  BackgroundWorker();
  ~BackgroundWorker();
  BackgroundWorker(const BackgroundWorker&) = delete;
  BackgroundWorker& operator=(const BackgroundWorker&) = delete;

  /// Starts `job`; at most one at a time (call wait() first).
  void start(std::function<void()> job);
  /// Blocks until the job finished; rethrows its exception.
  void wait();
  bool busy() const;

 private:
  void loop();
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool running_ = false, stopping_ = false;
  std::optional<base::Failure> error_;  // as data: see base/failure.hpp
  std::thread thread_;
};

/// Waits for a started job when the scope unwinds (the job may reference the scope's data).
class JoinOnExit {
 public:
  explicit JoinOnExit(BackgroundWorker& worker) : worker_(worker) {}
  ~JoinOnExit() {
    try {
      if (worker_.busy()) worker_.wait();
    } catch (...) {  // the scope is already failing with its own error
    }
  }

 private:
  BackgroundWorker& worker_;
};

}  // namespace hiercoll::algo
