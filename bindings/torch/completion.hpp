#pragma once
#include <ATen/core/ivalue.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "compat.hpp"
#include "hiercoll/communicator.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll_torch {

/// The c10d Work of one call: completes, together with its future (what DDP comm hooks wait on), once
/// every hiercoll operation behind the call finished and the results are in the caller's tensors.
class WorkHiercoll : public c10d::Work {
 public:
  /// `inputs` are only kept alive until the Work goes: hiercoll reads them while it runs.
  WorkHiercoll(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, std::vector<at::Tensor> inputs = {});
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }
  /// CUDA tensors hiercoll works on in place: wait() orders the current stream after the operations on the
  /// device and returns without blocking the host, as ProcessGroupNCCL's does. Others block until complete.
  bool wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) override;  // 0: c10d's "no timeout"
  void order_streams_after(std::vector<hiercoll::Work> works) { stream_ordered_ = std::move(works); }
  /// A receive: sourceRank() is the sender `receive` names once complete (what recv from any source returns).
  void set_receive(hiercoll::Work receive) { receive_ = std::move(receive); }
  int sourceRank() const override;
  bool stream_ordered() const { return !stream_ordered_.empty(); }
  /// Called once, by the completion thread. `error` is null on success.
  void complete(std::exception_ptr error);

 private:
  std::vector<at::Tensor> outputs_, inputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::vector<hiercoll::Work> stream_ordered_;
  std::optional<hiercoll::Work> receive_;
};

/// One thread per process group that turns finished hiercoll operations into completed c10d Works.
/// hiercoll's Work has no callbacks, and a collective must not be held up behind an earlier recv that is
/// still waiting for its sender, so the thread watches every pending call rather than the oldest only.
///
/// Completing a Work's future runs its callbacks (DDP comm hooks' `then`), and a callback may issue a collective
/// and wait for it (PowerSGD's hook does). So futures are completed on runner threads, never on the watching
/// thread, and a runner is added whenever none is idle: a callback blocked on a later Work cannot stop that Work
/// from completing (gloo's several worker threads give it the same property).
class CompletionThread {
 public:
  struct Pending {
    std::vector<hiercoll::Work> works;
    c10::intrusive_ptr<WorkHiercoll> handle;
    std::function<void()> finish;  ///< copies results out of staging buffers; runs only if every work succeeded
    /// A coalesced call (endCoalescing): the calls it gathers, settled before it, in issue order. Their
    /// works are in `works` too.
    std::vector<Pending> members;
  };

  CompletionThread();
  /// Waits for every pending call (each bounded by the communicator's timeout).
  ~CompletionThread();
  void add(Pending pending);
  /// Blocks until every call added so far has settled (c10d's waitForPendingWorks).
  void drain();
  /// What the first failed call failed with, if one did (c10d's getError).
  std::optional<hiercoll::ErrorCode> first_failure() const;

  /// At interpreter exit: waits until no call is being settled and settles none after. Completing a
  /// future runs (and releases) Python callbacks, which needs the GIL; doing that while Python finalizes
  /// kills the thread mid-destructor. Called for every live CompletionThread by quiesce_all().
  void quiesce();
  static void quiesce_all();

 private:
  void run();
  /// Copies results out and says how the call ended; the watching thread calls it. `complete` is for a runner.
  std::exception_ptr settle(Pending& pending);
  void complete_on_runner(c10::intrusive_ptr<WorkHiercoll> handle, std::exception_ptr error);
  void run_runner();

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::optional<hiercoll::ErrorCode> first_failure_;
  std::deque<Pending> pending_;
  bool stopping_ = false;
  bool settling_ = false;  // inside settle(), outside the lock
  bool quiesced_ = false;  // exit has begun: settle nothing more
  std::condition_variable idle_;
  // Runners: futures to complete, the threads completing them, how many wait for work and how many run one.
  static constexpr size_t kMaxRunners = 64;
  std::deque<std::pair<c10::intrusive_ptr<WorkHiercoll>, std::exception_ptr>> to_complete_;
  std::vector<std::thread> runners_;
  size_t idle_runners_ = 0;
  size_t completing_ = 0;
  std::condition_variable runner_wake_;
  std::thread thread_;
};

/// A hiercoll::Error becomes the c10::Error that torch's Python layer raises as RuntimeError; others pass.
std::exception_ptr as_torch_error(std::exception_ptr error, const char* what);

}  // namespace hiercoll_torch
