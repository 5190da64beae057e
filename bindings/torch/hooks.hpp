#pragma once
// The hooks torch registers on a backend (c10d::Backend::registerCompletionHook / registerAbortHook, torch >= 2.15):
// its flight recorder retires an entry when the completion hook says the Work finished, and dumps the record when an
// abort hook runs. Kept here in plain std::function form, so that older torch releases build the same code.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
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

  /// Whether any completion hook is registered: a Work with none to tell skips the lock.
  bool wants_completions() const { return completions_wanted_.load(std::memory_order_acquire); }
  /// A Work completed successfully: every completion hook is told, on the calling thread (the caller settling its own
  /// call or a completion runner; never with the GIL taken by hiercoll). Failed Works tell nobody, as torch asks.
  void completed(uint64_t key, std::optional<float> duration_ms) const;
  /// The group failed (a timeout, a peer's death or abort): runs every abort hook once. A second caller, on another
  /// thread, waits until the first has finished, so that a dump is complete before anyone goes on to fail a Work
  /// or end the process. An abort hook that throws is logged and the others still run.
  void run_abort_hooks();
  /// A new communicator replaced the failed one (reconfigure): its failure runs the abort hooks again.
  void rearm_abort_hooks();

 private:
  mutable std::mutex mutex_;  // held while hooks run: a hook must not register or unregister hooks
  std::map<int64_t, Completion> completions_;
  std::map<int64_t, Abort> aborts_;
  std::atomic<bool> completions_wanted_{false};
  std::mutex abort_mutex_;  // held while the abort hooks run: a second caller waits for them
  bool aborted_ = false;    // under abort_mutex_
};

}  // namespace hiercoll_torch
