#pragma once
// Why a communicator stopped, and who has been told: the first halt (abort(), or the peer watch reporting a lost
// rank), the first failure told to the on_failure callback, and what a failed or stopped operation's error says of
// them. One per communicator (CommunicatorImpl::halted_); what a halt wakes (the endpoint, the device, the node's flag
// waits, the queue) is the communicator's (CommunicatorImpl::halt).
//
// Threads: any. halt() and report_failure() may run on the peer watch's thread while operations read aborted().
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "base/failure.hpp"
#include "hiercoll/communicator.hpp"

namespace hiercoll::engine {

class HaltState {
 public:
  /// Set by the first halt, never cleared: every wait of every operation gives up when it reads it (channels and
  /// wait contexts keep its address, so it lives as long as the communicator).
  std::atomic<bool>& aborted() { return aborted_; }
  bool halted() const { return aborted_.load(); }
  /// This process asked for the halt (abort()): it is no failure to report.
  void mark_self_aborted() { self_aborted_ = true; }
  bool self_aborted() const { return self_aborted_.load(); }

  /// Records the first halt: `reason`, the rank whose loss caused it (`lost`), whether that rank is alive and gave
  /// up for a reason of its own (`peer_gave_up`); reports it (unless self-aborted) and wakes explain()'s waiters.
  /// False where a halt was recorded before: nothing changed.
  bool halt(const std::string& reason, std::optional<base::Failure::Lost> lost, bool peer_gave_up);
  /// The first halt's failure (halted() must hold), and whether its peer gave up rather than died.
  base::Failure reason() const;
  bool peer_gave_up() const;

  /// The callback that hears the first failure; told at once if there was one already.
  void on_failure(Communicator::FailureCallback callback);
  /// Tells the callback, the first time only (the callback runs under this object's lock).
  void report_failure(ErrorCode code, const std::string& reason);
  /// The failure `what` meets on a communicator this process aborted after it broke: the first failure, named, as a
  /// timeout if it was one, else a remote error; nullopt if nothing broke it before the abort.
  std::optional<base::Failure> failure_before_abort(const std::string& what);
  /// An operation issued after abort() or destruction: failure_before_abort()'s error, else InvalidUsageError.
  [[noreturn]] void throw_stopped(const std::string& what);
  /// A failure that came from a halt (a wait gave up) says why the communicator halted; one the data path saw (a
  /// fabric error) waits a moment for the peer watch to name a dead rank behind it, where `watched`.
  void explain(base::Failure& failure, const std::string& what, bool watched);

 private:
  std::atomic<bool> aborted_{false};
  std::atomic<bool> self_aborted_{false};
  std::atomic<bool> by_abort_{false};  // set with halt_: it came from this process's abort(), not a peer
  mutable std::mutex mutex_;
  std::optional<base::Failure> halt_;  // under mutex_: why it halted, and the peer whose loss halted it
  bool peer_gave_up_ = false;          // under mutex_: halt_ came from a peer that aborted, not one that died
  std::condition_variable halted_cv_;  // halt_ set
  // The callback, and the first failure it was (or will be) told, both under failure_mutex_, held while it runs.
  std::mutex failure_mutex_;
  Communicator::FailureCallback on_failure_;
  std::optional<std::pair<ErrorCode, std::string>> failure_told_;
};

}  // namespace hiercoll::engine
