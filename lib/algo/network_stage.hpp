#pragma once
// NetworkStage: where the inter-node phase of a pipelined schedule runs, and how the queue's work meets it.
//
// The hierarchical allreduce (allreduce_hier.cpp) issues each piece's intra-node work on a Queue and hands the
// piece's inter-node phase to a stage; before it issues the work that uses the result, it takes the piece back.
// Stages, by kind of queue:
//  - HelperStage (host memory): the issuing thread is the progress thread and each queue step has run when it
//    returns; jobs run one at a time on the helper thread, and take_back() blocks until the piece's job is done.
//  - InlineStage (host memory, one piece): nothing to overlap the network phase with, so the issuing thread runs
//    each job as it is handed over, without two thread hand-offs (each a wake-up, which dominates a small
//    allreduce where ranks share cores).
//  - DeferredStage (device memory): the issuing thread is the caller's, and queue steps only enqueue. Jobs are
//    kept for the operation's host half, which the progress thread runs later; the queue's work tells the host a
//    piece is ready, and waits for it to come back, through two HostFlags. So every CUDA call of an operation
//    is made when it is issued, and the progress thread never calls CUDA (see gpu/device_path.hpp).
#include <cstdint>
#include <functional>
#include <vector>

#include "algo/background.hpp"
#include "algo/channel.hpp"
#include "device/queue.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::algo {

class NetworkStage {
 public:
  /// The inter-node phase of one piece, on the operation's channel.
  using Job = std::function<void(Channel&)>;
  virtual ~NetworkStage() = default;
  /// The piece's data will be in its buffer once the queue work issued so far has run: run `job` on it.
  virtual void hand_over(Job job) = 0;
  /// Queue work issued from now on may use the result of the oldest piece handed over and not yet taken back.
  virtual void take_back() = 0;
};

class HelperStage final : public NetworkStage {
 public:
  HelperStage(BackgroundWorker& worker, Channel& ch) : worker_(worker), ch_(ch) {}
  /// Joins a job still running (its failure is the scope's own, already unwinding).
  ~HelperStage() override;
  void hand_over(Job job) override;
  void take_back() override;

 private:
  void join();  // waits for the running job, rethrowing its failure
  BackgroundWorker& worker_;
  Channel& ch_;
  size_t handed_ = 0, joined_ = 0, taken_ = 0;
};

class InlineStage final : public NetworkStage {
 public:
  explicit InlineStage(Channel& ch) : ch_(ch) {}
  void hand_over(Job job) override;
  void take_back() override;

 private:
  Channel& ch_;
  size_t handed_ = 0, taken_ = 0;
};

/// For a schedule that has no inter-node phase (one node): any hand-over is a bug.
class NoNetworkStage final : public NetworkStage {
 public:
  void hand_over(Job) override { throw InternalError("a one-node schedule handed over a network phase"); }
  void take_back() override { throw InternalError("a one-node schedule took back a network phase"); }
};

class DeferredStage final : public NetworkStage {
 public:
  /// `to_host`/`from_host`: the pair of flags of the queue's device path; `sequence`: the last number handed out
  /// on them (it runs on across operations, as their host halves run in issue order). `limits` bounds the device
  /// side's waits.
  DeferredStage(device::Queue& queue, device::HostFlag to_host, device::HostFlag from_host, uint64_t& sequence,
                device::WaitContext limits)
      : queue_(queue), to_host_(to_host), from_host_(from_host), sequence_(sequence), limits_(std::move(limits)) {}
  void hand_over(Job job) override;
  void take_back() override;
  /// The operation's host half: each job in turn, once the queue's work handed its piece over, then handing it
  /// back. Runs on the progress thread; touches host memory and the network only.
  Job host_half();

 private:
  struct Deferred {
    uint64_t sequence;
    Job job;
  };
  device::Queue& queue_;
  device::HostFlag to_host_, from_host_;
  uint64_t& sequence_;
  device::WaitContext limits_;
  std::vector<Deferred> jobs_;
  size_t taken_ = 0;
};

}  // namespace hiercoll::algo
