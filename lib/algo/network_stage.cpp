#include "algo/network_stage.hpp"

#include "hiercoll/errors.hpp"

namespace hiercoll::algo {

HelperStage::~HelperStage() {
  try {
    if (joined_ < handed_) join();
  } catch (...) {  // the scope is already failing with its own error
  }
}

void HelperStage::join() {
  joined_ = handed_;  // even if it throws: the job is over either way
  worker_.wait();
}

void HelperStage::hand_over(Job job) {
  if (joined_ < handed_) join();  // one job at a time
  worker_.start([this, job = std::move(job)] { job(ch_); });
  ++handed_;
}

void HelperStage::take_back() {
  if (taken_ >= handed_) throw InternalError(ch_.what() + ": a piece taken back that was never handed over");
  // Jobs run in order and one at a time: piece `taken_` is done once every job up to it was joined.
  if (joined_ <= taken_) join();
  ++taken_;
}

void InlineStage::hand_over(Job job) {
  job(ch_);
  ++handed_;
}

void InlineStage::take_back() {
  if (taken_ >= handed_) throw InternalError(ch_.what() + ": a piece taken back that was never handed over");
  ++taken_;
}

void DeferredStage::hand_over(Job job) {
  const uint64_t sequence = ++sequence_;
  queue_.signal(to_host_.queue_side, sequence, 0);
  jobs_.push_back({sequence, std::move(job)});
}

void DeferredStage::take_back() {
  if (taken_ >= jobs_.size()) throw InternalError(limits_.name() + ": a piece taken back that was never handed over");
  uint64_t* flag = from_host_.queue_side;
  queue_.wait(&flag, 1, jobs_[taken_++].sequence, 0, limits_);
}

NetworkStage::Job DeferredStage::host_half() {
  if (jobs_.empty()) return nullptr;
  return [queue = &queue_, to_host = to_host_, from_host = from_host_, jobs = std::move(jobs_)](Channel& ch) {
    const device::WaitContext ready{ch.deadline(), &ch.aborted(), ch.what() + " (device work for the network)"};
    for (const Deferred& d : jobs) {
      queue->host_wait(to_host, d.sequence, ready);
      d.job(ch);
      device::host_signal(from_host, d.sequence);
    }
  };
}

}  // namespace hiercoll::algo
