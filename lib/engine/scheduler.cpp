// The scheduler (scheduler.hpp): operations run one at a time in issue order, on the progress thread or, while it is
// idle, on the caller's thread (the caller's turn); point-to-point requests complete later, polled between operations.
#include "engine/scheduler.hpp"

#include <string>
#include <utility>

#include "algo/algorithms.hpp"

namespace hiercoll::engine {

void Scheduler::start() {
  thread_ = std::thread([this] { loop(); });
}

Work Scheduler::push(Op op, std::shared_ptr<StreamOrder> stream_order) {
  op.state = std::make_shared<WorkState>();
  op.state->stream_order = std::move(stream_order);
  Work work(op.state);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) owner_.throw_stopped(op.what);
    if (op.collective) op.flight_seq = owner_.record_queued(op.what);  // under mutex_: numbered in queue order
    queue_.push_back(std::move(op));
    turn_.fetch_or(kTurnBusy, std::memory_order_relaxed);  // no caller's turn begins until the queue is empty
  }
  queue_cv_.notify_one();
  if (asleep_in_endpoint_.load(std::memory_order_acquire)) owner_.endpoint().wake();
  return work;
}

void Scheduler::add_p2p(transport::RequestPtr request, std::shared_ptr<WorkState> state, int peer, std::string what) {
  p2p_.push_back({std::move(request), std::move(state), peer, algo::Clock::now() + owner_.timeout(), std::move(what)});
}

void Scheduler::finish(Op& op, std::optional<base::Failure> failure) {
  if (!op.completes_later || failure) op.state->finish(std::move(failure));
}

void Scheduler::poll_p2p(const base::Failure* all_failed) {
  auto now = algo::Clock::now();
  for (auto it = p2p_.begin(); it != p2p_.end();) {
    std::optional<base::Failure> failure;
    bool finished = it->request->done();
    if (finished) {
      try {
        algo::check_request(*it->request, it->peer, it->what);
      } catch (const Error& e) {
        failure = base::Failure::of(e);
      }
    } else if (all_failed) {
      failure = base::Failure{ErrorCode::kRemoteError, it->what + ": " + all_failed->message, all_failed->lost};
      finished = true;
    } else if (now >= it->deadline) {
      const std::string within = " within " + std::to_string(owner_.timeout().count()) + " ms";
      failure = base::Failure{ErrorCode::kTimeout,
                              it->what + ": " +
                                  (it->peer < 0 ? "no rank sent a matching message" + within
                                                : "rank " + std::to_string(it->peer) + " did not match it" + within)};
      finished = true;
    }
    if (finished) {
      const bool received = !it->request->is_send && it->request->done();
      it->state->finish(failure, received ? algo::tag_source(it->request->tag) : -1);
      it = p2p_.erase(it);
    } else {
      ++it;
    }
  }
}

void Scheduler::fail_pending_p2p() {
  const base::Failure why = owner_.halt_reason();
  owner_.endpoint().cancel_all(why.message);
  poll_p2p(&why);
}

void Scheduler::loop() {
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (queue_.empty() && p2p_.empty()) {
        // Idle: a caller may take its turn (release: what this thread did before is visible to it).
        turn_.fetch_and(~kTurnBusy, std::memory_order_release);
        queue_cv_.wait(lock, [&] {
          return (!queue_.empty() || stopping_) && (turn_.load(std::memory_order_acquire) & kTurnCaller) == 0;
        });
        // Woken by push() (which set kTurnBusy) or stop() (kTurnClosed): no caller's turn begins now.
      }
      if (queue_.empty()) {
        const bool halted = halted_.load();
        if (stopping_ && (p2p_.empty() || halted)) break;
        // Only point-to-point work is pending: sleep in the endpoint until it completes. Set under mutex_, with the
        // queue seen empty, so that a push() after the unlock sees it and wakes the endpoint.
        if (!halted) asleep_in_endpoint_.store(true, std::memory_order_relaxed);
        lock.unlock();
        if (halted) {  // point-to-point work still pending fails now
          fail_pending_p2p();
          continue;
        }
        owner_.endpoint().progress(kP2pSleep);
        asleep_in_endpoint_.store(false, std::memory_order_relaxed);
        poll_p2p();
        continue;
      }
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    std::optional<base::Failure> failure = owner_.run_op(op);
    // Nothing else to do: the turn goes back to callers before the Work finishes. Finished first, its caller
    // woke, called again, found the turn still busy and queued the next operation here too, and so on for good,
    // every small call paying two hand-offs. Once the turn is given back this thread touches neither the endpoint
    // nor p2p_.
    bool gave_turn = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (queue_.empty() && p2p_.empty()) {
        turn_.fetch_and(~kTurnBusy, std::memory_order_release);
        gave_turn = true;
      }
    }
    finish(op, std::move(failure));
    if (!gave_turn) poll_p2p();
  }
  if (halted_.load()) fail_pending_p2p();
}

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    turn_.fetch_or(kTurnClosed, std::memory_order_relaxed);
  }
  queue_cv_.notify_all();
  if (asleep_in_endpoint_.load(std::memory_order_acquire)) owner_.endpoint().wake();
  if (thread_.joinable()) thread_.join();
}

void Scheduler::end_caller_turn() {
  const uint32_t before = turn_.fetch_and(~kTurnCaller, std::memory_order_acq_rel);
  if ((before & (kTurnBusy | kTurnClosed)) != 0) {
    // Another thread enqueued (or the communicator closed) meanwhile, and the progress thread went back to sleep
    // seeing this turn. Taking mutex_ first orders this wake-up after its check of the word, or before it.
    { std::lock_guard<std::mutex> lock(mutex_); }
    queue_cv_.notify_one();  // the progress thread is its only waiter
  }
}

std::optional<Work> Scheduler::run_here(Op& op) {
  if (!take_caller_turn()) return std::nullopt;
  op.state = std::make_shared<WorkState>();
  Work work(op.state);
  if (op.collective) op.flight_seq = owner_.record_queued(op.what);
  // The endpoint is this thread's until the turn ends: the progress thread waits while it is taken.
  finish(op, owner_.run_op(op));
  end_caller_turn();
  return work;
}

}  // namespace hiercoll::engine
