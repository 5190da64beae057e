#include "engine/halt.hpp"

#include "base/log.hpp"
#include "watch/peer_watch.hpp"

namespace hiercoll::engine {

bool HaltState::halt(const std::string& reason, std::optional<base::Failure::Lost> lost, bool peer_gave_up) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (halt_) return false;
    halt_ = base::Failure{ErrorCode::kRemoteError, reason, lost};
    peer_gave_up_ = peer_gave_up;
    by_abort_ = self_aborted_.load();
    aborted_ = true;  // before the waiters wake: an operation that fails on this halt sees it in the next one too
  }
  if (!self_aborted_) report_failure(ErrorCode::kRemoteError, reason);
  halted_cv_.notify_all();
  return true;
}

base::Failure HaltState::reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return *halt_;
}

bool HaltState::peer_gave_up() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peer_gave_up_;
}

void HaltState::on_failure(Communicator::FailureCallback callback) {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  on_failure_ = std::move(callback);
  if (on_failure_ && failure_told_) on_failure_(failure_told_->first, failure_told_->second);
}

void HaltState::report_failure(ErrorCode code, const std::string& reason) {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  if (failure_told_) return;
  failure_told_.emplace(code, reason);
  if (!on_failure_) return;
  try {
    on_failure_(code, reason);
  } catch (const std::exception& e) {
    HIERCOLL_LOG(kWarn, "the on_failure callback threw: " << e.what());
  }
}

std::optional<base::Failure> HaltState::failure_before_abort(const std::string& what) {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  if (!failure_told_) return std::nullopt;
  // As the kind it was: a timeout stays a timeout (torch's callers look for "timed out").
  const ErrorCode code = failure_told_->first == ErrorCode::kTimeout ? ErrorCode::kTimeout : ErrorCode::kRemoteError;
  return base::Failure{code, what + ": the communicator is broken by an earlier error: " + failure_told_->second +
                                 " (and was aborted since)"};
}

void HaltState::throw_stopped(const std::string& what) {
  // Aborted after a failure (as torch's backend aborts it after a timeout): the failure is what the caller must hear.
  if (auto first = failure_before_abort(what)) base::throw_failure(*first);
  throw InvalidUsageError(what + ": the communicator was aborted or destroyed");
}

void HaltState::explain(base::Failure& failure, const std::string& what, bool watched) {
  if (aborted_ && by_abort_ && failure.code == ErrorCode::kRemoteError) {
    // Halted by this process's abort() after a failure (torch's backend aborts so): that failure is the cause.
    if (auto first = failure_before_abort(what)) {
      failure = *first;
      return;
    }
  }
  if (aborted_ && failure.code == ErrorCode::kRemoteError) {
    std::lock_guard<std::mutex> lock(mutex_);
    failure.message = what + ": " + halt_->message;
    failure.lost = halt_->lost;
    return;
  }
  // A peer's death can reach the data path first: the fabric reports the connection's loss as an error that
  // names no rank. The peer watch names it moments later (after its report grace); wait that long for it.
  const bool maybe_a_death = failure.code == ErrorCode::kFabricError || failure.code == ErrorCode::kSystemError ||
                             failure.code == ErrorCode::kRemoteError;
  if (!watched || !maybe_a_death) return;
  std::unique_lock<std::mutex> lock(mutex_);
  if (halted_cv_.wait_for(lock, watch::PeerWatch::kReportGrace + std::chrono::milliseconds(500),
                          [&] { return halt_.has_value(); })) {
    failure =
        base::Failure{ErrorCode::kRemoteError,
                      what + ": " + halt_->message + " (the data path saw: " + failure.message + ")", halt_->lost};
  }
}

}  // namespace hiercoll::engine
