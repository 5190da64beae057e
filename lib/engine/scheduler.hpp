#pragma once
// The scheduler: a communicator's operations run one at a time in issue order, on its progress thread or, while that
// thread is idle, on the caller's thread (the caller's turn); point-to-point requests complete later, polled between
// operations. What an operation does, and what running one means (the flight record, the failure it may meet), are
// the communicator's: Scheduler::Owner.
//
// Threads: push(), run_here(), take_caller_turn() and end_caller_turn() on callers' threads; the loop on the
// progress thread (start()); add_p2p() and poll_p2p() on whichever thread has the turn; wake() from any thread;
// stop() from any thread but the progress thread.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "algo/channel.hpp"
#include "base/failure.hpp"
#include "engine/work_state.hpp"
#include "hiercoll/communicator.hpp"
#include "transport/transport.hpp"

namespace hiercoll::engine {

class Scheduler {
 public:
  struct Op {
    std::string what;
    std::function<void(Op&)> run;  // on whichever thread has the turn
    std::shared_ptr<WorkState> state;
    bool completes_later = false;   // point-to-point: finished by poll_p2p, not when run returns
    std::function<void()> skipped;  // device work: releases what the caller's thread prepared if run never runs
    bool collective = false;        // recorded by the flight recorder
    uint64_t flight_seq = 0;
  };

  /// What the scheduler asks of its communicator.
  class Owner {
   public:
    /// Runs `op` on this thread and says whether it failed; the scheduler finishes its Work afterwards, so that the
    /// progress thread can give the turn back before the waiting caller wakes.
    virtual std::optional<base::Failure> run_op(Op& op) = 0;
    /// The endpoint the point-to-point requests are posted on: the progress thread sleeps in it while only they are
    /// pending, and push() wakes it.
    virtual transport::Endpoint& endpoint() = 0;
    /// Why the communicator halted; asked only once `halted` (the constructor's) is set.
    virtual base::Failure halt_reason() = 0;
    /// An operation enqueued after stop(): throws the error it meets.
    [[noreturn]] virtual void throw_stopped(const std::string& what) = 0;
    /// Numbers a collective in the flight record, in queue order (under the queue's lock).
    virtual uint64_t record_queued(const std::string& what) = 0;
    /// The time a point-to-point request has to complete.
    virtual std::chrono::milliseconds timeout() const = 0;

   protected:
    ~Owner() = default;
  };

  /// `halted`: set for good when the communicator halts (HaltState::aborted()); `caller_thread`: whether callers may
  /// take the turn at all (HIERCOLL_CALLER_THREAD).
  Scheduler(Owner& owner, const std::atomic<bool>& halted, bool caller_thread)
      : owner_(owner), halted_(halted), caller_thread_(caller_thread) {}
  ~Scheduler() { stop(); }

  /// Starts the progress thread.
  void start();
  /// Stops and joins the progress thread; later pushes throw (Owner::throw_stopped).
  void stop();
  /// Enqueues `op` for the progress thread; its Work completes when the operation has (or, for point-to-point, its
  /// request has).
  Work push(Op op, std::shared_ptr<StreamOrder> stream_order = nullptr);
  /// Runs `op` on the caller's thread if it can take the turn now: its finished Work; otherwise nullopt (and `op`
  /// untouched), and the caller pushes it.
  std::optional<Work> run_here(Op& op);
  /// The caller's turn to run an operation: taken only while the progress thread is idle with nothing queued or
  /// pending, and the communicator can still run operations; given back by end_caller_turn().
  bool take_caller_turn() {
    if (!caller_thread_ || halted_.load(std::memory_order_relaxed)) return false;
    uint32_t idle = 0;
    return turn_.compare_exchange_strong(idle, kTurnCaller, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void end_caller_turn();
  /// Later operations go to the progress thread, which fails them: the communicator broke.
  void close_turn() { turn_.fetch_or(kTurnClosed, std::memory_order_release); }
  /// A posted point-to-point request, finished by poll_p2p (by the thread that has the turn).
  void add_p2p(transport::RequestPtr request, std::shared_ptr<WorkState> state, int peer, std::string what);
  /// Finishes the point-to-point requests that completed or passed their deadline; with `all_failed`, every one
  /// still pending fails with it (its message after the request's name).
  void poll_p2p(const base::Failure* all_failed = nullptr);
  /// Wakes the progress thread (a halt: it fails what is pending).
  void wake() { queue_cv_.notify_all(); }
  bool on_progress_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  struct PendingP2P {
    transport::RequestPtr request;
    std::shared_ptr<WorkState> state;
    int peer;
    algo::Clock::time_point deadline;
    std::string what;
  };

  void loop();
  /// Halted: cancels the point-to-point requests still posted; their Works fail with the halt's reason.
  void fail_pending_p2p();
  /// Finishes `op`'s Work after Owner::run_op, unless it completes later (point-to-point, finished by poll_p2p).
  static void finish(Op& op, std::optional<base::Failure> failure);

  Owner& owner_;
  const std::atomic<bool>& halted_;
  const bool caller_thread_;
  std::mutex mutex_;
  std::condition_variable queue_cv_;
  std::deque<Op> queue_;
  bool stopping_ = false;
  // Operations run one at a time, in issue order: on the progress thread, or (run_here) on the caller's thread
  // while the progress thread is idle (waiting, with nothing queued or pending) and stays so. Who may run is one
  // word, so that a caller takes and gives back its turn with one atomic instruction each instead of a lock and an
  // unlock of mutex_ each (a visible share of a small call: docs/design.md). kTurnBusy: the progress thread is not
  // idle or something is queued (set by push() and cleared by the progress thread as it goes idle, both under
  // mutex_); kTurnClosed: stopping or broken, for good; kTurnCaller: a caller runs an operation.
  static constexpr uint32_t kTurnCaller = 1, kTurnBusy = 2, kTurnClosed = 4;
  std::atomic<uint32_t> turn_{kTurnBusy};
  // The progress thread sleeps in the endpoint for point-to-point work (set under mutex_): push() wakes it. The
  // slice bounds how late a point-to-point timeout is reported.
  std::atomic<bool> asleep_in_endpoint_{false};
  static constexpr std::chrono::milliseconds kP2pSleep{50};
  std::list<PendingP2P> p2p_;  // the thread with the turn only
  std::thread thread_;
};

}  // namespace hiercoll::engine
