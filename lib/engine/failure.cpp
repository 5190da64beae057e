// What a failure does (communicator_impl.hpp): abort and halt, the on_failure callback, the error a failed or stopped
// operation carries (explain_halt names the first failure and the ranks behind), breaking the communicator for the
// operations after it, and the pending point-to-point work a failure ends.
#include <algorithm>
#include <string>

#include "algo/algorithms.hpp"
#include "base/clock.hpp"
#include "base/log.hpp"
#include "device/host_queue.hpp"
#include "engine/collective.hpp"
#include "engine/communicator_impl.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::engine {

void CommunicatorImpl::abort() {
  self_aborted_ = true;
  halt("the communicator was aborted");
  stop_progress();
  if (watch_) watch_->leave(/*aborted=*/true);  // the peers' operations with this rank cannot finish: they hear it
}

void CommunicatorImpl::halt(const std::string& reason, std::optional<base::Failure::Lost> lost, bool peer_gave_up) {
  {
    std::lock_guard<std::mutex> lock(halt_mutex_);
    if (halt_) return;
    halt_ = base::Failure{ErrorCode::kRemoteError, reason, lost};
    halt_peer_gave_up_ = peer_gave_up;
    halt_by_abort_ = self_aborted_.load();
    aborted_ = true;  // before the waiters wake: an operation that fails on this halt sees it in the next one too
  }
  if (!self_aborted_) report_failure(ErrorCode::kRemoteError, reason);
  halt_cv_.notify_all();
  if (endpoint_open_.load(std::memory_order_acquire))
    endpoint_->wake();  // a wait asleep in the network looks at aborted_ now, not at the end of its slice
  // Not under device_mutex_: an issue holds it for as long as a first call's IPC rendezvous takes.
  if (auto path = std::atomic_load(&device_)) path->abort();  // device-side waits give up too
  device::HostQueue::wake_sleepers();  // and flag waits asleep within the node, now rather than at their slice's end
  queue_cv_.notify_all();
}

void CommunicatorImpl::on_failure(Communicator::FailureCallback callback) {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  on_failure_ = std::move(callback);
  if (on_failure_ && failure_told_) on_failure_(failure_told_->first, failure_told_->second);
}

std::optional<base::Failure> CommunicatorImpl::failure_before_abort(const std::string& what) {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  if (!failure_told_) return std::nullopt;
  // As the kind it was: a timeout stays a timeout (torch's callers look for "timed out").
  const ErrorCode code = failure_told_->first == ErrorCode::kTimeout ? ErrorCode::kTimeout : ErrorCode::kRemoteError;
  return base::Failure{code, what + ": the communicator is broken by an earlier error: " + failure_told_->second +
                                 " (and was aborted since)"};
}

void CommunicatorImpl::throw_stopped(const std::string& what) {
  // Aborted after a failure (as torch's backend aborts it after a timeout): the failure is what the caller must hear.
  if (auto first = failure_before_abort(what)) base::throw_failure(*first);
  throw InvalidUsageError(what + ": the communicator was aborted or destroyed");
}

void CommunicatorImpl::report_failure(ErrorCode code, const std::string& reason) {
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

void CommunicatorImpl::explain_halt(base::Failure& failure, const std::string& what) {
  if (aborted_ && halt_by_abort_ && failure.code == ErrorCode::kRemoteError) {
    // Halted by this process's abort() after a failure (torch's backend aborts so): that failure is the cause.
    if (auto first = failure_before_abort(what)) {
      failure = *first;
      return;
    }
  }
  if (aborted_ && failure.code == ErrorCode::kRemoteError) {
    std::lock_guard<std::mutex> lock(halt_mutex_);
    failure.message = what + ": " + halt_->message;
    failure.lost = halt_->lost;
    return;
  }
  // A peer's death can reach the data path first: the fabric reports the connection's loss as an error that
  // names no rank. The peer watch names it moments later (after its report grace); wait that long for it.
  const bool maybe_a_death = failure.code == ErrorCode::kFabricError || failure.code == ErrorCode::kSystemError ||
                             failure.code == ErrorCode::kRemoteError;
  if (!watch_ || !maybe_a_death) return;
  std::unique_lock<std::mutex> lock(halt_mutex_);
  if (halt_cv_.wait_for(lock, PeerWatch::kReportGrace + std::chrono::milliseconds(500),
                        [&] { return halt_.has_value(); })) {
    failure =
        base::Failure{ErrorCode::kRemoteError,
                      what + ": " + halt_->message + " (the data path saw: " + failure.message + ")", halt_->lost};
  }
}

void CommunicatorImpl::fail(base::Failure& failure, const std::string& what, bool collective) {
  explain_halt(failure, what + " (rank " + std::to_string(rank_) + ")");
  if (collective) on_collective_failure(failure);
  break_on(what, failure);
}

void CommunicatorImpl::break_on(const std::string& what, const base::Failure& failure) {
  broken_ = failure;
  if (!self_aborted_) report_failure(failure.code, failure.message);
  turn_.fetch_or(kTurnClosed, std::memory_order_release);  // later operations go to the progress thread: it fails them
  HIERCOLL_LOG(kWarn, failure.message);
  // Requests of the failed operation may still be posted: cancel them all, the communicator is done.
  endpoint_->cancel_all(what + " failed");
  const base::Failure all{ErrorCode::kRemoteError, "the communicator is broken by an earlier error: " + failure.message,
                          failure.lost};
  poll_p2p(&all);
}

void CommunicatorImpl::on_collective_failure(base::Failure& failure) {
  if (failure.code == ErrorCode::kTimeout) failure.message += " (timeout " + std::to_string(timeout().count()) + " ms)";
  if (failure.code == ErrorCode::kTimeout && size_ > 1) {
    // Every rank stuck in a collective times out at about the same moment and asks the others through the store
    // how far they got; a short grace, so the error is not much later than the timeout itself.
    const auto grace = std::min(std::chrono::milliseconds(2000), timeout() / 4);
    failure.message += record::who_is_behind(*store_, rank_, size_, flight_.completed(), grace);
  }
  if (!settings_.flight_dump.empty()) {
    std::string name = instance_;
    std::replace(name.begin(), name.end(), '/', '_');
    const std::string path = settings_.flight_dump + "/hiercoll-flight-" + name + "-" + std::to_string(rank_) + ".json";
    if (FILE* file = std::fopen(path.c_str(), "w")) {
      const std::string text = flight_.json(instance_, rank_, size_) + "\n";
      std::fwrite(text.data(), 1, text.size(), file);
      std::fclose(file);
      failure.message += "; flight record in " + path;
    } else {
      HIERCOLL_LOG(kWarn, "HIERCOLL_FLIGHT_DUMP: cannot write " << path);
    }
  }
}

void CommunicatorImpl::fail_pending_p2p() {
  const base::Failure why = [&] {  // set: aborted_ is set with it
    std::lock_guard<std::mutex> lock(halt_mutex_);
    return *halt_;
  }();
  endpoint_->cancel_all(why.message);
  poll_p2p(&why);
}

}  // namespace hiercoll::engine
