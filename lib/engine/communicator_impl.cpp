// The communicator once made: its life's ends (start-up is startup.cpp; the queue, the progress thread and the
// caller's turn are scheduler.cpp; what a failure or a halt does, failure.cpp) and the device glue between a
// collective and the communicator's gpu::DevicePath.
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
  scheduler_.stop();
  // An opening still under way finishes (its waits give up at once if the communicator halted): it uses this
  // communicator's store, and the peers' openings wait for this rank's address.
  if (deferred_) deferred_->join();
  // Where acknowledgements need this rank's calls, its peers' last sends to it complete before it goes.
  if (!halted_.halted()) endpoint_->quiesce(kQuiesceLimit);
  if (watch_) watch_->leave(/*aborted=*/false);
}

void CommunicatorImpl::set_timeout(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0)
    throw InvalidUsageError("set_timeout: timeout must be positive, got " + std::to_string(timeout.count()) + " ms");
  timeout_ms_ = timeout.count();
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
    std::atomic_store(&device_,
                      std::shared_ptr<gpu::DevicePath>(gpu::DevicePath::create(device, settings_.cuda_piece_bytes)));
  }
  if (device_->device() != device) {
    throw InvalidUsageError(std::string(what) + ": buffers on CUDA device " + std::to_string(device) +
                            ", but this communicator's device buffers live on device " +
                            std::to_string(device_->device()) + " (one device per communicator, as in NCCL)");
  }
  return device_;
}

Work CommunicatorImpl::enqueue_device_alone(const record::CollectiveName& name, int device, gpu::StreamHandle stream,
                                            void* out, const void* in, size_t bytes) {
  const char* what = algo::to_string(name.kind);
  if (halted_.halted()) halted_.throw_stopped(what);
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
  const algo::OpContext issue{{algo::Clock::now() + timeout(), &halted_.aborted(), what}, size()};
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
  Scheduler::Op op;
  op.what = what;
  op.collective = true;
  op.run = [this, descriptor, path, ticket, host_half = std::move(host_half)](Scheduler::Op& self) {
    algo::Channel channel = next_channel(self.what);
    try {
      if (settings_.check_collectives) algo::check_agreement(channel, descriptor, describe_op);
      if (host_half) host_half(channel);
      path->wait_done(ticket, {channel.deadline(), &halted_.aborted(), channel.what()});
    } catch (...) {
      path->abort();  // nothing may spin on for an operation that is over
      throw;
    }
  };
  op.skipped = [path] { path->abort(); };
  try {
    return scheduler_.push(std::move(op), std::make_shared<EventOrder>(path, stream, end));
  } catch (...) {
    path->abort();  // the device work is enqueued, but no host half will run (the EventOrder released `end`)
    throw;
  }
}

algo::NodeMemory& CommunicatorImpl::device_node_memory(const algo::OpContext& issue, gpu::DevicePath& path) {
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
  algo::NodeMemory& memory =
      path.node_memory(layout_.local_rank, layout_.local_size, hierarchy_.rail.size() > 1, exchange);
  if (!device_memory_pinned_) {
    pin_node_memory(memory, false);
    device_memory_pinned_ = true;
  }
  return memory;
}

void CommunicatorImpl::pin_node_memory(const algo::NodeMemory& memory, bool areas) {
  if (areas && memory.peers != nullptr) {
    for (int slot = 0; slot < algo::kHierBufferSets; ++slot) {
      if (auto pinned = endpoint_->pin(memory.peers->area(slot, layout_.local_rank), memory.peers->area_bytes()))
        node_pins_.push_back(std::move(pinned));
    }
  }
  if (memory.network_staging[0] != nullptr && memory.peers != nullptr) {
    const size_t bytes = algo::network_staging_bytes(memory.peers->area_bytes(), layout_.local_size);
    for (uint8_t* staging : memory.network_staging) {
      if (auto pinned = endpoint_->pin(staging, bytes)) node_pins_.push_back(std::move(pinned));
    }
  }
}

// The operations a communicator hands its scheduler (scheduler.hpp), and what running one means.

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
  Scheduler::Op op;
  op.what = std::move(what);
  op.collective = true;
  op.run = [this, descriptor, body = std::move(body)](Scheduler::Op& self) {
    algo::Channel channel = next_channel(self.what);
    if (settings_.check_collectives) algo::check_agreement(channel, descriptor, describe_op);
    body(channel);
  };
  // Alone, a collective is at most a copy: the caller's thread does it rather than hand it to the progress thread
  // and wait for it to come back, two thread hand-offs for nothing (a size-1 group is common: a DeviceMesh
  // dimension of 1).
  if (size_ == 1) {
    if (std::optional<Work> done = scheduler_.run_here(op)) return *std::move(done);
  }
  return scheduler_.push(std::move(op));
}

Work CommunicatorImpl::enqueue_p2p(std::string what, int peer,
                                   std::function<transport::RequestPtr(transport::Endpoint&)> post) {
  Scheduler::Op op;
  op.what = std::move(what);
  op.completes_later = true;
  op.run = [this, peer, post = std::move(post)](Scheduler::Op& self) {
    scheduler_.add_p2p(post(*endpoint_), self.state, peer, self.what);
  };
  return scheduler_.push(std::move(op));
}

std::optional<base::Failure> CommunicatorImpl::run_op(Scheduler::Op& op) {
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
    if (op.collective) flight_.started(op.flight_seq, !scheduler_.on_progress_thread());
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

}  // namespace hiercoll::engine
