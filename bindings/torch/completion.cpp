#include "completion.hpp"

#include <c10/util/Exception.h>

#include <algorithm>

#include "hiercoll/errors.hpp"

namespace hiercoll_torch {

WorkHiercoll::WorkHiercoll(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, std::vector<at::Tensor> inputs)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      inputs_(std::move(inputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

void WorkHiercoll::complete(std::exception_ptr error) {
  finish(error);
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

int WorkHiercoll::sourceRank() const {
  TORCH_CHECK(receive_, "hiercoll Work: sourceRank() is only defined for a receive");
  TORCH_CHECK(receive_->is_completed(), "hiercoll Work: sourceRank() before the receive completed; wait() first");
  return receive_->source();
}

bool WorkHiercoll::wait(std::chrono::milliseconds timeout) {
  if (stream_ordered_.empty()) return c10d::Work::wait(timeout);
  try {
    for (auto& work : stream_ordered_) work.wait();
  } catch (...) {
    std::rethrow_exception(as_torch_error(std::current_exception(), c10d::opTypeToString(retrieveOpType()).c_str()));
  }
  return true;
}

std::exception_ptr as_torch_error(std::exception_ptr error, const char* what) {
  try {
    std::rethrow_exception(error);
  } catch (const hiercoll::Error& e) {
    try {
      TORCH_CHECK(false, "hiercoll ", what, " failed (", hiercoll::to_string(e.code()), "): ", e.what());
    } catch (...) {
      return std::current_exception();
    }
  } catch (...) {
    return std::current_exception();
  }
  return error;
}

namespace {
std::mutex registry_mutex;
std::vector<CompletionThread*>& registry() {
  static auto* threads = new std::vector<CompletionThread*>();  // never destroyed: used during exit
  return *threads;
}
}  // namespace

CompletionThread::CompletionThread() : thread_([this] { run(); }) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  registry().push_back(this);
}

void CompletionThread::quiesce() {
  std::unique_lock<std::mutex> lock(mutex_);
  quiesced_ = true;
  idle_.wait(lock, [&] { return !settling_ && completing_ == 0; });
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
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();  // settles every pending call first
  runner_wake_.notify_all();
  for (auto& runner : runners_) runner.join();  // after completing what is left
}

void CompletionThread::add(Pending pending) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(std::move(pending));
  }
  wake_.notify_all();
}

void CompletionThread::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [&] {
    return (pending_.empty() && !settling_ && to_complete_.empty() && completing_ == 0) || quiesced_;
  });
}

std::optional<hiercoll::ErrorCode> CompletionThread::first_failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return first_failure_;
}

std::exception_ptr CompletionThread::settle(Pending& pending) {
  std::exception_ptr error;
  try {
    for (auto& work : pending.works) work.wait();
  } catch (const hiercoll::Error& e) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!first_failure_) first_failure_ = e.code();
    }
    error = std::current_exception();
  } catch (...) {
    error = std::current_exception();
  }
  for (auto& member : pending.members) {
    std::exception_ptr member_error = settle(member);
    complete_on_runner(member.handle, member_error);
    if (!error) error = member_error;
  }
  if (!error && pending.finish) {
    try {
      pending.finish();
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (error) error = as_torch_error(error, c10d::opTypeToString(pending.handle->retrieveOpType()).c_str());
  return error;
}

void CompletionThread::complete_on_runner(c10::intrusive_ptr<WorkHiercoll> handle, std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mutex_);
  to_complete_.emplace_back(std::move(handle), std::move(error));
  if (idle_runners_ == 0 && runners_.size() < kMaxRunners) {
    runners_.emplace_back([this] { run_runner(); });
  } else {
    runner_wake_.notify_one();
  }
}

void CompletionThread::run_runner() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    ++idle_runners_;
    runner_wake_.wait(lock, [&] { return !to_complete_.empty() || (stopping_ && pending_.empty()) || quiesced_; });
    --idle_runners_;
    if (quiesced_ || to_complete_.empty()) return;  // exiting, or stopped with nothing left
    auto [handle, error] = std::move(to_complete_.front());
    to_complete_.pop_front();
    ++completing_;
    lock.unlock();
    handle->complete(error);  // runs the future's callbacks, which may block on later Works
    handle.reset();           // the last reference to the future and its callbacks may go here
    error = nullptr;
    lock.lock();
    --completing_;
    idle_.notify_all();
  }
}

void CompletionThread::run() {
  auto all_done = [](const Pending& p) {
    for (const auto& work : p.works) {
      if (!work.is_completed()) return false;
    }
    return true;
  };
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
    if (pending_.empty() || quiesced_) return;  // stopping with nothing left to drain, or the process is exiting

    // Settle every finished call, outside the lock so callers can keep adding.
    std::vector<Pending> finished;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (all_done(*it)) {
        finished.push_back(std::move(*it));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    if (!finished.empty()) {
      settling_ = true;
      lock.unlock();
      for (auto& p : finished) complete_on_runner(p.handle, settle(p));
      finished.clear();
      lock.lock();
      settling_ = false;
      idle_.notify_all();  // quiesce() and drain() wait for this
      continue;
    }
    // Nothing finished: sleep on the oldest call's first unfinished operation, briefly, so a later call
    // that finishes first (a collective behind a waiting recv) is still noticed.
    hiercoll::Work oldest;
    for (const auto& work : pending_.front().works) {
      if (!work.is_completed()) {
        oldest = work;
        break;
      }
    }
    lock.unlock();
    oldest.wait_for(std::chrono::microseconds(500));
    lock.lock();
  }
}

}  // namespace hiercoll_torch
