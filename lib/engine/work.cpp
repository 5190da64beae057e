#include "base/log.hpp"
#include "engine/work_state.hpp"
#include "hiercoll/communicator.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll {

bool Work::is_completed() const {
  if (!state_) return true;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->done || !state_->device_end) return state_->done;
  }
  return engine::WorkState::poll_device(state_);
}

void Work::wait(std::chrono::milliseconds timeout) const {
  if (!state_) return;
  if (state_->stream_order) {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      if (state_->done) {
        if (state_->failure) base::throw_failure(*state_->failure);
        return;  // the result is in device memory already: nothing left to order
      }
    }
    state_->stream_order->order_caller_stream();  // the device waits; this thread goes on
    return;
  }
  synchronize(timeout);
}

void Work::synchronize(std::chrono::milliseconds timeout) const {
  if (!state_) return;
  engine::WorkState::watch_device(state_);
  std::unique_lock<std::mutex> lock(state_->mutex);
  auto finished = [&] { return state_->done; };
  if (timeout == std::chrono::milliseconds::max()) {
    state_->done_cv.wait(lock, finished);
  } else if (!state_->done_cv.wait_for(lock, timeout, finished)) {
    throw TimeoutError("Work::wait: the operation did not finish within " + std::to_string(timeout.count()) + " ms");
  }
  if (state_->failure) base::throw_failure(*state_->failure);
}

bool Work::wait_for(std::chrono::microseconds timeout) const {
  if (!state_) return true;
  engine::WorkState::watch_device(state_);
  std::unique_lock<std::mutex> lock(state_->mutex);
  return state_->done_cv.wait_for(lock, timeout, [&] { return state_->done; });
}

void Work::on_completion(std::function<void()> callback) const {
  if (!callback) return;
  if (state_) {
    bool kept = false;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      if (!state_->done) {
        state_->callbacks.push_back(std::move(callback));
        kept = true;
      }
    }
    if (kept) {
      engine::WorkState::watch_device(state_);  // with a device_end nothing else would finish it
      return;
    }
  }
  engine::WorkState::run_callback(callback);  // finished already: run it here, outside the lock
}

bool engine::WorkState::poll_device(const std::shared_ptr<WorkState>& self) {
  std::optional<base::Failure> failure;
  try {
    if (!self->device_end->reached()) return false;
  } catch (const Error& e) {
    failure = base::Failure::of(e);
  }
  self->finish(std::move(failure));
  return true;
}

void engine::WorkState::watch_device(const std::shared_ptr<WorkState>& self) {
  {
    std::lock_guard<std::mutex> lock(self->mutex);
    if (self->done || !self->device_end || self->watched) return;
    self->watched = true;
  }
  // The watcher holds the state until the end: a Work dropped meanwhile still runs its callbacks.
  self->device_end->watch([self](std::optional<base::Failure> failure) { self->finish(std::move(failure)); });
}

void engine::WorkState::run_callback(const std::function<void()>& callback) noexcept {
  try {
    callback();
  } catch (const std::exception& e) {
    HIERCOLL_LOG(kWarn, "a Work completion callback threw, which it must not: " << e.what());
  } catch (...) {
    HIERCOLL_LOG(kWarn, "a Work completion callback threw, which it must not");
  }
}

int Work::source() const {
  if (!state_) return -1;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done ? state_->source : -1;
}

std::exception_ptr Work::error() const {
  if (!state_) return nullptr;
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (!state_->failure) return nullptr;
  try {
    base::throw_failure(*state_->failure);
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace hiercoll
