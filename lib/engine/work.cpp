#include "base/log.hpp"
#include "engine/work_state.hpp"
#include "hiercoll/communicator.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll {

bool Work::is_completed() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
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
  std::unique_lock<std::mutex> lock(state_->mutex);
  return state_->done_cv.wait_for(lock, timeout, [&] { return state_->done; });
}

void Work::on_completion(std::function<void()> callback) const {
  if (!callback) return;
  if (state_) {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (!state_->done) {
      state_->callbacks.push_back(std::move(callback));
      return;
    }
  }
  engine::WorkState::run_callback(callback);  // finished already: run it here, outside the lock
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
