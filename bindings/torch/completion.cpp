#include "completion.hpp"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <utility>

#include "hiercoll/errors.hpp"

namespace hiercoll_torch {

std::chrono::steady_clock::time_point& call_start() {
  thread_local std::chrono::steady_clock::time_point start;
  return start;
}

WorkHiercoll::WorkHiercoll(int rank, c10d::OpType type, std::shared_ptr<const GroupHooks> hooks,
                           std::vector<at::Tensor> outputs, CallTensors tensors)
    : c10d::Work(rank, type),
      hooks_(std::move(hooks)),
      start_(call_start()),
      outputs_(std::move(outputs)),
      tensors_(std::move(tensors)) {
  if (start_ == std::chrono::steady_clock::time_point()) start_ = std::chrono::steady_clock::now();
}

float WorkHiercoll::getDuration() const {
  TORCH_CHECK(duration_ms_ >= 0, "hiercoll Work: getDuration() is only defined once the Work completed successfully");
  return duration_ms_;
}

c10::TypePtr WorkHiercoll::list_of_tensors() {
  static const c10::TypePtr type = c10::ListType::create(c10::TensorType::get());  // made once, not per call
  return type;
}

void WorkHiercoll::settle_tensors(bool succeeded) {
  CallTensors tensors = std::exchange(tensors_, {});  // let them go, whatever happens
  if (!succeeded) return;
  for (auto& [caller, written] : tensors.copy_back) caller.copy_(written);
}

void WorkHiercoll::complete(std::exception_ptr error) {
  if (!error) {
    duration_ms_ = std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - start_).count();
  }
  if (!error) GroupRecord::retire(record_, duration_ms_);
  finish(error);  // isCompleted() from here on: a flight-recorder post-hook that sees it retires the entry itself
#if HIERCOLL_TORCH_HAS_HOOKS  // no hooks to tell before it
  if (!error && hooks_ != nullptr && hooks_->wants_completions()) hooks_->completed(getCompletionKey(), duration_ms_);
#endif
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(future_mutex_);
    completed_ = true;
    error_ = error;
    future = future_;
  }
  if (future) settle(*future);
}

// Made when first asked for: a blocking dist.all_reduce never asks. Making and completing one per call (a Future,
// the list of its value, their locks) was a large share of the binding's own time in a small dist.all_reduce.
c10::intrusive_ptr<c10::ivalue::Future> WorkHiercoll::getFuture() {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  bool settle_now = false;
  {
    std::lock_guard<std::mutex> lock(future_mutex_);
    if (!future_) {
      future_ = c10::make_intrusive<c10::ivalue::Future>(list_of_tensors());
      settle_now = completed_;  // else complete() settles it
    }
    future = future_;
  }
  if (settle_now) settle(*future);
  return future;
}

// Outside future_mutex_: completing a future runs its callbacks, which may ask for it again.
void WorkHiercoll::settle(c10::ivalue::Future& future) {
  if (error_) {
    future.setError(error_);
  } else {
    future.markCompleted(c10::IValue(outputs_));
  }
}

int WorkHiercoll::sourceRank() const {
  TORCH_CHECK(receive_, "hiercoll Work: sourceRank() is only defined for a receive");
  TORCH_CHECK(receive_->is_completed(), "hiercoll Work: sourceRank() before the receive completed; wait() first");
  return receive_->source();
}

bool WorkHiercoll::wait(std::chrono::milliseconds timeout) {
  if (stream_ordered_.empty()) {
    if (completion_ != nullptr && !isCompleted()) completion_->wait_in_caller(*this, timeout);
    return c10d::Work::wait(timeout);  // completed by now (rethrows its error), or by the completion thread
  }
  try {
    for (auto& work : stream_ordered_) work.wait();
  } catch (...) {
    std::rethrow_exception(as_torch_error(std::current_exception(), c10d::opTypeToString(retrieveOpType()), rank_));
  }
  return true;
}

void throw_as_torch(const hiercoll::Error& error, const std::string& op, int rank) {
  const std::string where = "[hiercoll rank " + std::to_string(rank) + ", " + op + "] ";
  if (const auto* lost = dynamic_cast<const hiercoll::PeerLostError*>(&error)) {
    const std::string peer = "peer rank " + std::to_string(lost->rank());
    C10_THROW_ERROR(DistNetworkError, where + (lost->connection_closed() ? "Connection closed by " + peer
                                                                         : "Timed out waiting for " + peer + "'s heartbeat") +
                                          ": " + error.what());
  }
  switch (error.code()) {
    case hiercoll::ErrorCode::kTimeout:
      C10_THROW_ERROR(DistBackendError, where + "Timed out waiting for the operation to complete: " + error.what());
    case hiercoll::ErrorCode::kInvalidUsage:
      TORCH_CHECK(false, "hiercoll ", op, " (", hiercoll::to_string(error.code()), "): ", error.what());
    default:
      C10_THROW_ERROR(DistBackendError,
                      where + "failed (" + hiercoll::to_string(error.code()) + "): " + error.what());
  }
}

std::exception_ptr as_torch_error(std::exception_ptr error, const std::string& op, int rank) {
  try {
    std::rethrow_exception(error);
  } catch (const hiercoll::Error& e) {
    try {
      throw_as_torch(e, op, rank);
    } catch (...) {
      return std::current_exception();
    }
  } catch (...) {
  }
  return error;
}

struct CompletionThread::State {
  struct Waiting {
    Pending pending;
    size_t unfinished;  // operations still running, plus one until add() has registered every callback
    WorkHiercoll* handle = nullptr;  // pending.handle, also once a caller has taken `pending`
    bool caller_waits = false;       // a thread is in WorkHiercoll::wait for it: it settles the call
    bool finished = false;           // every operation finished while a caller waited
    bool claimed = false;            // the caller took `pending`; the entry only waits for its last callback
  };

  mutable std::mutex mutex;
  std::condition_variable wake;  // the watching thread: a call is ready, or it is time to stop
  std::condition_variable idle;  // drain() and quiesce(): settling or completing stopped
  std::list<Waiting> waiting;    // issued, an operation still running
  std::deque<Pending> ready;     // every operation finished, in the order the calls finished
  std::optional<hiercoll::ErrorCode> first_failure;
  std::function<void()> on_group_failure;  // set before any call
  std::atomic<bool> group_failed{false};
  bool failure_task_due = false;  // under mutex: group_failed() asked the watching thread to run on_group_failure
  bool stopping = false;
  bool settling = false;  // the watching thread is inside settle(), outside the lock
  bool quiesced = false;  // exit has begun: settle nothing more

  // Runners: futures to complete, the threads completing them, how many wait for work and how many run one.
  static constexpr size_t kMaxRunners = 64;
  std::deque<std::pair<c10::intrusive_ptr<WorkHiercoll>, std::exception_ptr>> to_complete;
  std::vector<std::thread> runners;
  size_t idle_runners = 0;
  size_t completing = 0;
  std::condition_variable runner_wake;

  bool nothing_pending() const { return waiting.empty() && ready.empty(); }

  // The last reference goes with the last thread that works on this state: runners the group's destructor could
  // not join (it ran on one of them, or they started after it) end by themselves.
  ~State() {
    for (auto& runner : runners) {
      if (runner.joinable()) runner.detach();
    }
  }

  // Drops a call's entry. A claimed call's handle may be gone by then (its caller settled it): not touched.
  void forget(std::list<Waiting>::iterator call) {
    if (call->handle != nullptr) call->handle->call_ = nullptr;
    waiting.erase(call);
  }

  // One operation of the call at `call` finished. Notifies under the lock: once `waiting` is empty the
  // CompletionThread may be destroyed, and nothing here may touch it after that.
  void operation_finished(std::list<Waiting>::iterator call) {
    std::lock_guard<std::mutex> lock(mutex);
    if (--call->unfinished > 0) return;
    if (call->claimed) {  // its caller settles it
      forget(call);
      idle.notify_all();
      return;
    }
    if (call->caller_waits) {  // its caller will claim it when it wakes
      call->finished = true;
      return;
    }
    ready.push_back(std::move(call->pending));
    forget(call);
    wake.notify_all();
  }
};

namespace {
std::mutex registry_mutex;
std::vector<CompletionThread*>& registry() {
  static auto* threads = new std::vector<CompletionThread*>();  // never destroyed: used during exit
  return *threads;
}
}  // namespace

CompletionThread::CompletionThread() : state_(std::make_shared<State>()) {
  // Registered before the thread starts: if registering throws, no joinable thread is left to terminate the process.
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    registry().push_back(this);
  }
  try {
    thread_ = std::thread([state = state_] { run(state); });
  } catch (...) {
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto& threads = registry();
    threads.erase(std::remove(threads.begin(), threads.end(), this), threads.end());
    throw;
  }
}

void CompletionThread::quiesce() {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  s.quiesced = true;
  s.wake.notify_all();
  s.runner_wake.notify_all();
  s.idle.wait(lock, [&] { return !s.settling && s.completing == 0; });
}

void CompletionThread::quiesce_all() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (auto* thread : registry()) thread->quiesce();
}

CompletionThread::~CompletionThread() {
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto& threads = registry();
    threads.erase(std::remove(threads.begin(), threads.end(), this), threads.end());
  }
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.stopping = true;
  }
  s.wake.notify_all();
  const auto self = std::this_thread::get_id();
  if (thread_.get_id() == self) {
    thread_.detach();  // destroyed from the failure task: the thread settles what is left, then ends
  } else {
    thread_.join();  // settles every pending call first, unless the process is exiting
  }
  std::vector<std::thread> runners;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.runner_wake.notify_all();
    for (auto& runner : s.runners) {
      if (runner.get_id() == self) {
        runner.detach();  // destroyed from a future's callback on this runner, which then ends by itself
      } else {
        runners.push_back(std::move(runner));
      }
    }
    s.runners.clear();
  }
  for (auto& runner : runners) runner.join();  // after completing what is left
  std::lock_guard<std::mutex> lock(s.mutex);
  // Exiting with calls unsettled: their callbacks may still fire, and the calls hold futures whose Python
  // callbacks must not be released now (see quiesce). Keep the state for the rest of the process, and let no
  // Work's wait() come back to this object.
  for (auto& call : s.waiting) {
    if (call.handle != nullptr) call.handle->completion_ = nullptr;
  }
  for (auto& pending : s.ready) pending.handle->completion_ = nullptr;
  // The failure task is the group's: a thread that outlives the group (above) must not run it.
  s.on_group_failure = nullptr;
  s.failure_task_due = false;
  if (!s.nothing_pending()) new std::shared_ptr<State>(state_);
}

void CompletionThread::add(Pending pending) {
  State& s = *state_;
  std::list<State::Waiting>::iterator call;
  // Coalesced calls and stream-ordered ones are settled here only; the others by their caller where it can.
  const bool callers = pending.members.empty() && !pending.handle->stream_ordered();
  if (callers && std::all_of(pending.works.begin(), pending.works.end(),
                             [](const hiercoll::Work& w) { return w.is_completed(); })) {
    // Every operation finished already (a small collective run on the caller's thread): settled here, without the
    // bookkeeping that lets another thread finish it (a lock, a list entry and a callback per operation).
    settle_here(pending);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    const size_t operations = pending.works.size();
    WorkHiercoll* handle = pending.handle.get();
    call = s.waiting.insert(s.waiting.end(), State::Waiting{std::move(pending), operations + 1, handle});
    if (callers) {
      handle->completion_ = this;
      handle->call_ = &*call;
    }
  }
  // The call cannot become ready (and leave `waiting`) before the last line: its own count holds it.
  for (const auto& work : call->pending.works) {
    work.on_completion([state = state_, call] { state->operation_finished(call); });
  }
  if (callers) {
    // Every operation finished already (a small allreduce run on the caller's thread): settle it here.
    std::unique_lock<std::mutex> lock(s.mutex);
    if (call->unfinished == 1) {
      Pending mine = std::move(call->pending);
      s.forget(call);
      lock.unlock();
      settle_here(mine);
      return;
    }
  }
  s.operation_finished(call);
}

bool CompletionThread::wait_in_caller(WorkHiercoll& handle, std::chrono::milliseconds timeout) {
  State& s = *state_;
  std::vector<hiercoll::Work> works;
  std::list<State::Waiting>::iterator call;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (handle.call_ == nullptr) return false;  // handed to this thread already
    call = std::find_if(s.waiting.begin(), s.waiting.end(), [&](const State::Waiting& w) { return &w == handle.call_; });
    if (call == s.waiting.end() || call->claimed || call->caller_waits) return false;
    call->caller_waits = true;
    works = call->pending.works;
  }
  // hiercoll's own completion: the progress thread finishes an operation and wakes this thread directly.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool done = true;
  for (const auto& work : works) {
    if (timeout.count() <= 0) {
      while (!work.wait_for(std::chrono::seconds(1))) {
      }
    } else {
      auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - std::chrono::steady_clock::now());
      if (!work.wait_for(std::max(left, std::chrono::microseconds(0)))) {
        done = false;
        break;
      }
    }
  }
  std::unique_lock<std::mutex> lock(s.mutex);
  if (!done) {  // timed out: the call goes back to the completion thread, and c10d's wait reports the timeout
    call->caller_waits = false;
    if (call->finished) {
      s.ready.push_back(std::move(call->pending));
      s.forget(call);
      s.wake.notify_all();
    }
    return false;
  }
  Pending mine = std::move(call->pending);
  call->claimed = true;
  handle.call_ = nullptr;
  call->handle = nullptr;
  if (call->finished) s.forget(call);  // else its last callback, about to run, lets the entry go
  lock.unlock();
  settle_here(mine);
  return true;
}

void CompletionThread::settle_here(Pending& pending) {
  std::exception_ptr error = settle(state_, pending);
  pending.handle->complete(error);  // runs the future's callbacks on this thread, as a runner would
}

void CompletionThread::drain() {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  s.idle.wait(lock, [&] {
    return (s.nothing_pending() && !s.settling && s.to_complete.empty() && s.completing == 0) || s.quiesced;
  });
}

void CompletionThread::on_group_failure(std::function<void()> task) { state_->on_group_failure = std::move(task); }

void CompletionThread::group_failed() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  s.group_failed = true;
  s.failure_task_due = true;
  s.wake.notify_all();
}

void CompletionThread::forget_failure() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  s.group_failed = false;
  s.failure_task_due = false;
  s.first_failure.reset();
}

std::optional<hiercoll::ErrorCode> CompletionThread::first_failure() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->first_failure;
}

std::exception_ptr CompletionThread::settle(const std::shared_ptr<State>& state, Pending& pending) {
  State& s = *state;
  std::exception_ptr error;
  try {
    for (auto& work : pending.works) work.wait();  // finished: returns at once, or rethrows its failure
  } catch (const hiercoll::Error& e) {
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      if (!s.first_failure) s.first_failure = e.code();
    }
    error = std::current_exception();
  } catch (...) {
    error = std::current_exception();
  }
  for (auto& member : pending.members) {
    std::exception_ptr member_error = settle(state, member);
    complete_on_runner(state, member.handle, member_error);
    if (!error) error = member_error;
  }
  try {
    pending.handle->settle_tensors(!error);
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  if (error && s.group_failed && s.on_group_failure) s.on_group_failure();  // before it completes
  if (error) error = as_torch_error(error, c10d::opTypeToString(pending.handle->retrieveOpType()), pending.handle->rank());
  return error;
}

void CompletionThread::complete_on_runner(const std::shared_ptr<State>& state, c10::intrusive_ptr<WorkHiercoll> handle,
                                          std::exception_ptr error) {
  State& s = *state;
  std::lock_guard<std::mutex> lock(s.mutex);
  s.to_complete.emplace_back(std::move(handle), std::move(error));
  if (s.idle_runners == 0 && s.runners.size() < State::kMaxRunners) {
    s.runners.emplace_back([state] { run_runner(state); });
  } else {
    s.runner_wake.notify_one();
  }
}

void CompletionThread::run_runner(const std::shared_ptr<State>& state) {
  State& s = *state;
  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    ++s.idle_runners;
    s.runner_wake.wait(lock,
                       [&] { return !s.to_complete.empty() || (s.stopping && s.nothing_pending()) || s.quiesced; });
    --s.idle_runners;
    if (s.quiesced || s.to_complete.empty()) return;  // exiting, or stopped with nothing left
    auto [handle, error] = std::move(s.to_complete.front());
    s.to_complete.pop_front();
    ++s.completing;
    lock.unlock();
    handle->complete(error);  // runs the future's callbacks, which may block on later Works
    handle.reset();           // the last reference to the future and its callbacks may go here
    error = nullptr;
    lock.lock();
    --s.completing;
    s.idle.notify_all();
  }
}

void CompletionThread::run(const std::shared_ptr<State>& state) {
  State& s = *state;
  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    s.wake.wait(lock, [&] {
      return !s.ready.empty() || s.failure_task_due || (s.stopping && s.waiting.empty()) || s.quiesced;
    });
    if (s.quiesced) return;  // the process is exiting
    if (std::exchange(s.failure_task_due, false) && s.on_group_failure) {
      lock.unlock();
      s.on_group_failure();
      lock.lock();
      continue;
    }
    if (s.ready.empty()) return;  // stopping with nothing left

    // Settle the finished calls outside the lock, so callers can keep adding and operations keep finishing.
    std::deque<Pending> finished;
    finished.swap(s.ready);
    s.settling = true;
    lock.unlock();
    for (auto& pending : finished) complete_on_runner(state, pending.handle, settle(state, pending));
    finished.clear();
    lock.lock();
    s.settling = false;
    s.idle.notify_all();  // quiesce() and drain() wait for this
  }
}

}  // namespace hiercoll_torch
