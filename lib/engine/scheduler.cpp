// The scheduler (communicator_impl.hpp): operations run one at a time in issue order, on the progress thread or,
// while it is idle, on the caller's thread (the caller's turn); point-to-point requests complete later, polled
// between operations.
#include <algorithm>
#include <string>

#include "algo/algorithms.hpp"
#include "base/clock.hpp"
#include "base/log.hpp"
#include "engine/collective.hpp"
#include "engine/communicator_impl.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::engine {

Work CommunicatorImpl::push(Op op, std::shared_ptr<StreamOrder> stream_order) {
  op.state = std::make_shared<WorkState>();
  op.state->stream_order = std::move(stream_order);
  Work work(op.state);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) halted_.throw_stopped(op.what);
    if (op.collective) op.flight_seq = flight_.queued(op.what);  // under mutex_: numbered in queue order
    queue_.push_back(std::move(op));
    turn_.fetch_or(kTurnBusy, std::memory_order_relaxed);  // no caller's turn begins until the queue is empty
  }
  queue_cv_.notify_one();
  if (asleep_in_endpoint_.load(std::memory_order_acquire)) endpoint_->wake();
  return work;
}

algo::Channel CommunicatorImpl::next_channel(const std::string& what) {
  const std::string rank = std::to_string(rank_);
  std::string name;
  name.reserve(what.size() + rank.size() + 8);  // one allocation
  name.append(what).append(" (rank ").append(rank).append(")");
  return algo::Channel(*endpoint_, world_ranks_, rank_, context_, sequence_++, algo::Clock::now() + timeout(),
                       std::move(name), algo_config_, scratch_, halted_.aborted());
}

Work CommunicatorImpl::enqueue_collective(std::string what, const algo::OpDescriptor& descriptor,
                                          std::function<void(algo::Channel&)> body) {
  Op op;
  op.what = std::move(what);
  op.collective = true;
  op.run = [this, descriptor, body = std::move(body)](Op& self) {
    algo::Channel channel = next_channel(self.what);
    if (settings_.check_collectives) algo::check_agreement(channel, descriptor, describe_op);
    body(channel);
  };
  // Alone, a collective is at most a copy: the caller's thread does it rather than hand it to the progress thread
  // and wait for it to come back, two thread hand-offs for nothing (a size-1 group is common: a DeviceMesh
  // dimension of 1).
  if (size_ == 1) {
    if (std::optional<Work> done = run_here(op)) return *std::move(done);
  }
  return push(std::move(op));
}

Work CommunicatorImpl::enqueue_p2p(std::string what, int peer,
                                   std::function<transport::RequestPtr(transport::Endpoint&)> post) {
  Op op;
  op.what = std::move(what);
  op.completes_later = true;
  op.run = [this, peer, post = std::move(post)](Op& self) {
    p2p_.push_back({post(*endpoint_), self.state, peer, algo::Clock::now() + timeout(), self.what});
  };
  return push(std::move(op));
}

std::optional<base::Failure> CommunicatorImpl::run_op(Op& op) {
  std::optional<base::Failure> failure;
  if (halted_.halted()) {
    failure = base::Failure{ErrorCode::kRemoteError, {}};
    halted_.explain(*failure, op.what, watch_ != nullptr);
  } else if (broken_) {
    failure =
        base::Failure{ErrorCode::kRemoteError,
                      op.what + ": the communicator is broken by an earlier error: " + broken_->message, broken_->lost};
  }
  if (failure && op.skipped) {
    try {
      op.skipped();
    } catch (const std::exception& e) {
      HIERCOLL_LOG(kWarn, op.what << ": releasing its device work failed: " << e.what());
    }
  }
  if (failure && op.collective) flight_.ended(op.flight_seq, false);  // never ran
  if (!failure) {
    if (op.collective) flight_.started(op.flight_seq, std::this_thread::get_id() != thread_.get_id());
    try {
      op.run(op);
    } catch (const Error& e) {
      failure = base::Failure::of(e);
    } catch (const std::exception& e) {
      failure = base::Failure{ErrorCode::kInternal, op.what + ": " + e.what()};
    }
    if (op.collective) flight_.ended(op.flight_seq, !failure);
    if (failure) fail(*failure, op.what, op.collective);
  }
  return failure;
}

void CommunicatorImpl::finish_op(Op& op, std::optional<base::Failure> failure) {
  if (!op.completes_later || failure) op.state->finish(std::move(failure));
}

void CommunicatorImpl::poll_p2p(const base::Failure* all_failed) {
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
      const std::string within = " within " + std::to_string(timeout().count()) + " ms";
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

void CommunicatorImpl::progress_loop() {
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
        // Woken by push() (which set kTurnBusy) or stop_progress() (kTurnClosed): no caller's turn begins now.
      }
      if (queue_.empty()) {
        if (stopping_ && (p2p_.empty() || halted_.halted())) break;
        const bool halted = halted_.halted();
        // Only point-to-point work is pending: sleep in the endpoint until it completes. Set under mutex_, with the
        // queue seen empty, so that a push() after the unlock sees it and wakes the endpoint.
        if (!halted) asleep_in_endpoint_.store(true, std::memory_order_relaxed);
        lock.unlock();
        if (halted) {  // point-to-point work still pending fails now
          fail_pending_p2p();
          continue;
        }
        endpoint_->progress(kP2pSleep);
        asleep_in_endpoint_.store(false, std::memory_order_relaxed);
        poll_p2p();
        continue;
      }
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    std::optional<base::Failure> failure = run_op(op);
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
    finish_op(op, std::move(failure));
    if (!gave_turn) poll_p2p();
  }
  if (halted_.halted()) fail_pending_p2p();
}

void CommunicatorImpl::stop_progress() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    turn_.fetch_or(kTurnClosed, std::memory_order_relaxed);
  }
  queue_cv_.notify_all();
  if (asleep_in_endpoint_.load(std::memory_order_acquire)) endpoint_->wake();
  if (thread_.joinable()) thread_.join();
}

bool CommunicatorImpl::take_caller_turn() {
  // Anything but an idle progress thread with nothing queued, and the communicator open: the progress thread runs
  // the operation, after what is ahead of it, or fails it as it should.
  if (halted_.aborted().load(std::memory_order_relaxed)) return false;
  uint32_t idle = 0;
  return turn_.compare_exchange_strong(idle, kTurnCaller, std::memory_order_acquire, std::memory_order_relaxed);
}

void CommunicatorImpl::end_caller_turn() {
  const uint32_t before = turn_.fetch_and(~kTurnCaller, std::memory_order_acq_rel);
  if ((before & (kTurnBusy | kTurnClosed)) != 0) {
    // Another thread enqueued (or the communicator closed) meanwhile, and the progress thread went back to sleep
    // seeing this turn. Taking mutex_ first orders this wake-up after its check of the word, or before it.
    { std::lock_guard<std::mutex> lock(mutex_); }
    queue_cv_.notify_one();  // the progress thread is its only waiter
  }
}

std::optional<Work> CommunicatorImpl::run_here(Op& op) {
  if (!settings_.caller_thread || !take_caller_turn()) return std::nullopt;
  op.state = std::make_shared<WorkState>();
  Work work(op.state);
  if (op.collective) op.flight_seq = flight_.queued(op.what);
  // The endpoint is this thread's until the turn ends: the progress thread waits while it is taken.
  finish_op(op, run_op(op));
  end_caller_turn();
  return work;
}

}  // namespace hiercoll::engine
