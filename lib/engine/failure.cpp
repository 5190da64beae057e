// What a failure does (communicator_impl.hpp): abort and what a halt wakes (the halt itself, the on_failure callback
// and the errors that name it: halt.hpp), the error a failed collective carries (the ranks behind), breaking the
// communicator for the operations after it, and the pending point-to-point work a failure ends.
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
  halted_.mark_self_aborted();
  halt("the communicator was aborted");
  scheduler_.stop();
  if (watch_) watch_->leave(/*aborted=*/true);  // the peers' operations with this rank cannot finish: they hear it
}

void CommunicatorImpl::halt(const std::string& reason, std::optional<base::Failure::Lost> lost, bool peer_gave_up) {
  if (!halted_.halt(reason, lost, peer_gave_up)) return;
  if (endpoint_open_.load(std::memory_order_acquire))
    endpoint_->wake();  // a wait asleep in the network looks at aborted_ now, not at the end of its slice
  // Not under device_mutex_: an issue holds it for as long as a first call's IPC rendezvous takes.
  if (auto path = std::atomic_load(&device_)) path->abort();  // device-side waits give up too
  device::HostQueue::wake_sleepers();  // and flag waits asleep within the node, now rather than at their slice's end
  scheduler_.wake();
}

void CommunicatorImpl::fail(base::Failure& failure, const std::string& what, bool collective) {
  halted_.explain(failure, what + " (rank " + std::to_string(rank_) + ")", watch_ != nullptr);
  if (collective) on_collective_failure(failure);
  break_on(what, failure);
}

void CommunicatorImpl::break_on(const std::string& what, const base::Failure& failure) {
  broken_ = failure;
  if (!halted_.self_aborted()) halted_.report_failure(failure.code, failure.message);
  scheduler_.close_turn();  // later operations go to the progress thread: it fails them
  HIERCOLL_LOG(kWarn, failure.message);
  // Requests of the failed operation may still be posted: cancel them all, the communicator is done.
  endpoint_->cancel_all(what + " failed");
  const base::Failure all{ErrorCode::kRemoteError, "the communicator is broken by an earlier error: " + failure.message,
                          failure.lost};
  scheduler_.poll_p2p(&all);
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

}  // namespace hiercoll::engine
