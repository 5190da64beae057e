#include "hooks.hpp"

#include <c10/util/Logging.h>

#include <exception>
#include <utility>

namespace hiercoll_torch {

void GroupHooks::add_completion(int64_t id, Completion hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  completions_[id] = std::move(hook);
  completions_wanted_.store(true, std::memory_order_release);
}

void GroupHooks::remove_completion(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  completions_.erase(id);
  completions_wanted_.store(!completions_.empty(), std::memory_order_release);
}

void GroupHooks::add_abort(int64_t id, Abort hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  aborts_[id] = std::move(hook);
}

void GroupHooks::remove_abort(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  aborts_.erase(id);
}

void GroupHooks::completed(uint64_t key, std::optional<float> duration_ms) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [id, hook] : completions_) hook(key, duration_ms);
}

void GroupHooks::run_abort_hooks() {
  std::lock_guard<std::mutex> once(abort_mutex_);
  if (std::exchange(aborted_, true)) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [id, hook] : aborts_) {
    try {
      hook();
    } catch (const std::exception& e) {
      LOG(WARNING) << "hiercoll: abort hook " << id << " threw: " << e.what();
    }
  }
}

void GroupHooks::rearm_abort_hooks() {
  std::lock_guard<std::mutex> once(abort_mutex_);
  aborted_ = false;
}

}  // namespace hiercoll_torch
