// The communicator once made (start-up is startup.cpp): its queue and progress thread, the caller's turn, device and
// point-to-point work, and what a failure or a halt does to what is pending.
#include "engine/communicator_impl.hpp"

#include <algorithm>
#include <string>

#include "algo/algorithms.hpp"
#include "base/clock.hpp"
#include "base/log.hpp"
#include "engine/collective.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::engine {

std::string describe_op(const algo::OpDescriptor& d) {
  std::string text;
  record::describe_into(text, static_cast<algo::Kind>(d.kind), d.count, static_cast<DataType>(d.type),
                static_cast<ReduceOp>(d.op), d.root);
  return text;
}

CommunicatorImpl::~CommunicatorImpl() {
  stop_progress();
  // An opening still under way finishes (its waits give up at once if the communicator halted): it uses this
  // communicator's store, and the peers' openings wait for this rank's address.
  if (deferred_) deferred_->join();
  // Where acknowledgements need this rank's calls, its peers' last sends to it complete before it goes.
  if (!aborted_) endpoint_->quiesce(kQuiesceLimit);
  if (watch_) watch_->leave(/*aborted=*/false);
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

void CommunicatorImpl::set_timeout(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0)
    throw InvalidUsageError("set_timeout: timeout must be positive, got " + std::to_string(timeout.count()) + " ms");
  timeout_ms_ = timeout.count();
}

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
  if (endpoint_open_.load(std::memory_order_acquire)) endpoint_->wake();  // a wait asleep in the network looks at aborted_ now, not at the end of its slice
  // Not under device_mutex_: an issue holds it for as long as a first call's IPC rendezvous takes.
  if (auto path = std::atomic_load(&device_)) path->abort();  // device-side waits give up too
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
    failure = base::Failure{ErrorCode::kRemoteError,
                            what + ": " + halt_->message + " (the data path saw: " + failure.message + ")", halt_->lost};
  }
}

Work CommunicatorImpl::push(Op op, std::shared_ptr<StreamOrder> stream_order) {
  op.state = std::make_shared<WorkState>();
  op.state->stream_order = std::move(stream_order);
  Work work(op.state);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw_stopped(op.what);
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
                       std::move(name), algo_config_, scratch_, aborted_);
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

namespace {

// Work::wait() of a device collective: the caller's stream waits for the event that ends the operation's work.
class EventOrder final : public StreamOrder {
 public:
  EventOrder(std::shared_ptr<gpu::DevicePath> path, gpu::StreamHandle stream, gpu::EventHandle end)
      : path_(std::move(path)), stream_(stream), end_(end) {}
  ~EventOrder() override { path_->release(end_); }
  void order_caller_stream() override { path_->order_caller_stream(stream_, end_); }

 private:
  std::shared_ptr<gpu::DevicePath> path_;
  gpu::StreamHandle stream_;
  gpu::EventHandle end_;
};

// The end of a one-rank device collective: an event on the caller's stream, after its copy. Work::wait() has
// nothing to order (the work is on the caller's stream already); whether it ended, the device says.
class AloneEnd final : public StreamOrder, public DeviceEnd {
 public:
  AloneEnd(std::shared_ptr<gpu::DevicePath> path, gpu::EventHandle end) : path_(std::move(path)), end_(end) {}
  ~AloneEnd() override { path_->release(end_); }
  void order_caller_stream() override {}
  bool reached() override { return path_->reached(end_); }
  void watch(std::function<void(std::optional<base::Failure>)> then) override { path_->watch(end_, std::move(then)); }

 private:
  std::shared_ptr<gpu::DevicePath> path_;
  gpu::EventHandle end_;
};

}  // namespace

std::shared_ptr<gpu::DevicePath> CommunicatorImpl::device_path(int device, const char* what) {
  if (!device_) {
    std::atomic_store(&device_, std::shared_ptr<gpu::DevicePath>(gpu::DevicePath::create(device, settings_.cuda_piece_bytes)));
  }
  if (device_->device() != device) {
    throw InvalidUsageError(std::string(what) + ": buffers on CUDA device " + std::to_string(device) +
                            ", but this communicator's device buffers live on device " +
                            std::to_string(device_->device()) + " (one device per communicator, as in NCCL)");
  }
  return device_;
}

Work CommunicatorImpl::enqueue_device_alone(const record::CollectiveName& name, int device, gpu::StreamHandle stream, void* out,
                                            const void* in, size_t bytes) {
  const char* what = algo::to_string(name.kind);
  if (aborted_) throw_stopped(what);
  gpu::EventHandle end = nullptr;
  std::shared_ptr<gpu::DevicePath> path;
  {
    std::lock_guard<std::mutex> lock(device_mutex_);
    path = device_path(device, what);
    end = path->issue_alone(stream, out, in, bytes, what);
  }
  auto ending = std::make_shared<AloneEnd>(std::move(path), end);
  auto state = std::make_shared<WorkState>();
  state->stream_order = ending;
  state->device_end = std::move(ending);
  flight_.issued(name, base::coarse_now());
  return Work(std::move(state));
}

Work CommunicatorImpl::enqueue_device_collective(std::string what, const algo::OpDescriptor& descriptor, int device,
                                                 gpu::StreamHandle stream, DeviceIssue issue_work) {
  // One issuer at a time: operations' device work must be enqueued in the order the progress thread runs their
  // host halves, and tickets must be published in the order they are handed out.
  std::lock_guard<std::mutex> lock(device_mutex_);
  std::shared_ptr<gpu::DevicePath> path = device_path(device, what.c_str());
  path->follow_caller(stream, what);
  const algo::Issue issue{{algo::Clock::now() + timeout(), &aborted_, what}, size()};
  const uint64_t ticket = device_tickets_ + 1;
  algo::NetworkStage::Job host_half;
  gpu::EventHandle end = nullptr;
  try {
    host_half = issue_work(issue, *path);
    end = path->complete(ticket);
  } catch (...) {
    path->abort();  // work already enqueued may wait for hand-offs that will never come
    throw;
  }
  device_tickets_ = ticket;
  Op op;
  op.what = what;
  op.collective = true;
  op.run = [this, descriptor, path, ticket, host_half = std::move(host_half)](Op& self) {
    algo::Channel channel = next_channel(self.what);
    try {
      if (settings_.check_collectives) algo::check_agreement(channel, descriptor, describe_op);
      if (host_half) host_half(channel);
      path->wait_done(ticket, {channel.deadline(), &aborted_, channel.what()});
    } catch (...) {
      path->abort();  // nothing may spin on for an operation that is over
      throw;
    }
  };
  op.skipped = [path] { path->abort(); };
  try {
    return push(std::move(op), std::make_shared<EventOrder>(path, stream, end));
  } catch (...) {
    path->abort();  // the device work is enqueued, but no host half will run (the EventOrder released `end`)
    throw;
  }
}

algo::NodeMemory& CommunicatorImpl::device_node_memory(const algo::Issue& issue, gpu::DevicePath& path) {
  auto exchange = [&](const std::vector<uint8_t>& mine) {
    // Local ranks swap CUDA IPC handles through the store, under keys of this node and this communicator.
    const std::string prefix = "cuda-ipc/" + std::to_string(layout_.node) + "/";
    store_->set(prefix + std::to_string(layout_.local_rank), mine);
    std::vector<std::string> keys;
    for (int l = 0; l < layout_.local_size; ++l) keys.push_back(prefix + std::to_string(l));
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(issue.limits.deadline - algo::Clock::now());
    try {
      store_->wait(keys, std::max(left, std::chrono::milliseconds(1)));
    } catch (const TimeoutError&) {
      throw TimeoutError(issue.limits.what +
                         ": not every local rank published its CUDA IPC handle (did every rank pass "
                         "device buffers to this collective?)");
    }
    std::vector<std::vector<uint8_t>> handles;
    for (const auto& key : keys) handles.push_back(store_->get(key));
    return handles;
  };
  return path.node_memory(layout_.local_rank, layout_.local_size, hierarchy_.rail.size() > 1, exchange);
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
  if (aborted_) {
    failure = base::Failure{ErrorCode::kRemoteError, {}};
    explain_halt(*failure, op.what);
  } else if (broken_) {
    failure = base::Failure{ErrorCode::kRemoteError,
                            op.what + ": the communicator is broken by an earlier error: " + broken_->message,
                            broken_->lost};
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
        if (stopping_ && (p2p_.empty() || aborted_)) break;
        const bool halted = aborted_;
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
  if (aborted_) fail_pending_p2p();
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
