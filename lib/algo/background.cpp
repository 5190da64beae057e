#include "algo/background.hpp"

#include "hiercoll/errors.hpp"

namespace hiercoll::algo {

BackgroundWorker::BackgroundWorker() : thread_([this] { loop(); }) {}

BackgroundWorker::~BackgroundWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BackgroundWorker::start(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = std::move(job);
    running_ = true;
    error_.reset();
  }
  cv_.notify_all();
}

void BackgroundWorker::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return !running_; });
  if (error_) base::throw_failure(*std::exchange(error_, std::nullopt));
}

bool BackgroundWorker::busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return running_;
}

void BackgroundWorker::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || (running_ && job_); });
    if (stopping_) return;
    auto job = std::move(job_);
    job_ = nullptr;
    lock.unlock();
    std::optional<base::Failure> error;
    try {
      job();
    } catch (const Error& e) {
      error = base::Failure::of(e);
    } catch (const std::exception& e) {
      error = base::Failure{ErrorCode::kInternal, e.what()};
    }
    lock.lock();
    error_ = error;
    running_ = false;
    cv_.notify_all();
  }
}

}  // namespace hiercoll::algo
