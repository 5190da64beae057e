#include "hooks.hpp"

#include <c10/util/Logging.h>

#include <condition_variable>
#include <exception>
#include <utility>

namespace hiercoll_torch {

namespace {

// Abort-hook runs under way in the process, and whether exit has closed them: a hook that asks for the GIL during
// finalization never returns to us.
struct ExitGate {
  std::mutex mutex;
  std::condition_variable idle;
  int running = 0;
  bool closed = false;
};

ExitGate& exit_gate() {
  static auto* gate = new ExitGate();  // never destroyed: used while the process exits
  return *gate;
}

// Copy-on-write: readers take a snapshot under the lock and run it outside.
template <typename Table, typename Change>
void rewrite(std::mutex& mutex, std::shared_ptr<const Table>& table, Change change) {
  std::lock_guard<std::mutex> lock(mutex);
  auto copy = std::make_shared<Table>(*table);
  change(*copy);
  table = std::move(copy);
}

}  // namespace

void GroupHooks::add_completion(int64_t id, Completion hook) {
  auto shared = std::make_shared<const Completion>(std::move(hook));
  rewrite(mutex_, completions_, [&](auto& table) { table[id] = shared; });
  completions_wanted_.store(true, std::memory_order_release);
}

void GroupHooks::remove_completion(int64_t id) {
  rewrite(mutex_, completions_, [&](auto& table) {
    table.erase(id);
    completions_wanted_.store(!table.empty(), std::memory_order_release);
  });
}

void GroupHooks::add_abort(int64_t id, Abort hook) {
  auto shared = std::make_shared<const Abort>(std::move(hook));
  rewrite(mutex_, aborts_, [&](auto& table) { table[id] = shared; });
}

void GroupHooks::remove_abort(int64_t id) {
  rewrite(mutex_, aborts_, [&](auto& table) { table.erase(id); });
}

void GroupHooks::completed(uint64_t key, std::optional<float> duration_ms) const {
  std::shared_ptr<const Table<Completion>> hooks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    hooks = completions_;
  }
  for (const auto& [id, hook] : *hooks) (*hook)(key, duration_ms);
}

void GroupHooks::run_abort_hooks() {
  {
    std::unique_lock<std::mutex> lock(abort_mutex_);
    if (aborted_) {  // another thread runs them, or ran them: its dump is complete before this caller goes on
      abort_done_.wait(lock, [&] { return !abort_running_; });
      return;
    }
    aborted_ = abort_running_ = true;
  }
  ExitGate& gate = exit_gate();
  bool open;
  {
    std::lock_guard<std::mutex> lock(gate.mutex);
    open = !gate.closed;  // closed: the interpreter is going, and a dump now would be killed half-way
    if (open) ++gate.running;
  }
  if (open) {
    std::shared_ptr<const Table<Abort>> hooks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      hooks = aborts_;
    }
    for (const auto& [id, hook] : *hooks) {
      try {
        (*hook)();
      } catch (const std::exception& e) {
        LOG(WARNING) << "hiercoll: abort hook " << id << " threw: " << e.what();
      }
    }
    std::lock_guard<std::mutex> lock(gate.mutex);
    --gate.running;
    gate.idle.notify_all();
  }
  std::lock_guard<std::mutex> lock(abort_mutex_);
  abort_running_ = false;
  abort_done_.notify_all();
}

// Never waits for a run under way: reconfigure() calls it, perhaps with the GIL held, which that run may need.
void GroupHooks::rearm_abort_hooks() {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  aborted_ = false;
}

bool GroupHooks::close_for_exit(std::chrono::milliseconds limit) {
  ExitGate& gate = exit_gate();
  std::unique_lock<std::mutex> lock(gate.mutex);
  gate.closed = true;
  return gate.idle.wait_for(lock, limit, [&] { return gate.running == 0; });
}

}  // namespace hiercoll_torch
