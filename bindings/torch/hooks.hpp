#pragma once
// The hooks torch registers on a backend (c10d::Backend::registerCompletionHook / registerAbortHook, torch >= 2.15):
// its flight recorder retires an entry when the completion hook says the Work finished, and dumps the record when an
// abort hook runs. Kept here in plain std::function form, so that older torch releases build the same code.
//
// torch's contract (c10d/hooks/FlightRecorderHook.hpp): a backend never runs a hook while holding the lock that guards
// its hook table. torch unregisters with the GIL held, and a hook may take the GIL (the abort hook's dump does), so a
// table lock held across a hook deadlocks the two threads. Hooks run from a snapshot of the table instead; one that
// is unregistered while it runs finishes that run, which torch's hooks allow for (they hold their owner weakly).
//
// Process exit: an abort hook run from a hiercoll thread while Python finalizes is killed inside torch when it asks
// for the GIL (glibc aborts with "exception not rethrown"). close_for_exit(), called from an atexit handler before
// finalization, stops new runs and waits for the ones under way, so that a dump begun is a dump written.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

namespace hiercoll_torch {

class GroupHooks {
 public:
  /// (the Work's completion key, its duration in ms)
  using Completion = std::function<void(uint64_t key, std::optional<float> duration_ms)>;
  using Abort = std::function<void()>;

  void add_completion(int64_t id, Completion hook);
  void remove_completion(int64_t id);
  void add_abort(int64_t id, Abort hook);
  void remove_abort(int64_t id);

  /// Whether any completion hook is registered: a Work with none to tell skips the snapshot.
  bool wants_completions() const { return completions_wanted_.load(std::memory_order_acquire); }
  /// A Work completed successfully: every completion hook is told, on the calling thread (the caller settling its own
  /// call or a completion runner; never with the GIL taken by hiercoll). Failed Works tell nobody, as torch asks.
  void completed(uint64_t key, std::optional<float> duration_ms) const;
  /// The group failed (a timeout, a peer's death or abort): starts every abort hook, once per failure, on a thread of
  /// their own, and returns at once. torch's flight recorder dumps there, gathering stack traces for seconds: the
  /// failed Works raise meanwhile, as gloo's do, and nothing of hiercoll waits for it (the thread holds `hooks`, not
  /// the group; torch's hooks hold their owners weakly). The run is counted before this returns, so that an exit that
  /// begins once the failed call has raised still waits for the dump (close_for_exit). An abort hook that throws is
  /// logged and the others still run. Does nothing once the process is exiting.
  static void start_abort_hooks(const std::shared_ptr<GroupHooks>& hooks);
  /// A new communicator replaced the failed one (reconfigure): its failure runs the abort hooks again.
  void rearm_abort_hooks();

  /// Process-wide, at interpreter exit (before finalization, the GIL released): no abort hook starts from now on,
  /// and the runs under way finish first, for at most `limit`. True if none was left running.
  static bool close_for_exit(std::chrono::milliseconds limit);

 private:
  template <typename Hook>
  using Table = std::map<int64_t, std::shared_ptr<const Hook>>;

  mutable std::mutex mutex_;  // guards the tables; never held while a hook runs
  std::shared_ptr<const Table<Completion>> completions_ = std::make_shared<Table<Completion>>();
  std::shared_ptr<const Table<Abort>> aborts_ = std::make_shared<Table<Abort>>();
  std::atomic<bool> completions_wanted_{false};
  std::mutex abort_mutex_;  // never held while a hook runs either
  bool aborted_ = false;    // under abort_mutex_: the hooks ran, or run, for this failure
};

}  // namespace hiercoll_torch
