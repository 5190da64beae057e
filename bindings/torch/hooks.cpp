#include "hooks.hpp"

#include <c10/util/Logging.h>

#include <condition_variable>
#include <exception>
#include <system_error>
#include <thread>
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

void GroupHooks::start_abort_hooks(const std::shared_ptr<GroupHooks>& hooks) {
  {
    std::lock_guard<std::mutex> lock(hooks->abort_mutex_);
    if (std::exchange(hooks->aborted_, true)) return;  // started for this failure already
  }
  ExitGate& gate = exit_gate();
  {
    std::lock_guard<std::mutex> lock(gate.mutex);
    if (gate.closed) return;  // the interpreter is going, and a dump now would be killed half-way
    ++gate.running;
  }
  std::shared_ptr<const Table<Abort>> table;
  {
    std::lock_guard<std::mutex> lock(hooks->mutex_);
    table = hooks->aborts_;
  }
  auto run = [table]() mutable {
    for (const auto& [id, hook] : *table) {
      try {
        (*hook)();
      } catch (const std::exception& e) {
        LOG(WARNING) << "hiercoll: abort hook " << id << " threw: " << e.what();
      }
    }
    // Let go of the hooks inside the gate: a group destroyed meanwhile leaves this snapshot their last owner, and
    // torch's recorder hook owns the ProcessGroup, whose destructor takes the GIL. Released after the gate opened,
    // that could run during finalization; released here, exit waits for it (with the GIL let go).
    table.reset();
    ExitGate& gate = exit_gate();
    std::lock_guard<std::mutex> lock(gate.mutex);
    --gate.running;
    gate.idle.notify_all();
  };
  try {
    std::thread(run).detach();
  } catch (const std::system_error& e) {  // no thread to be had: the dump is worth more than the failed call's time
    LOG(WARNING) << "hiercoll: no thread for torch's abort hooks (" << e.what() << "); running them here";
    run();
  }
}

// Never waits for a run under way: reconfigure() calls it, perhaps with the GIL held, which that run may need;
// a later failure starts the hooks again beside it.
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
