#pragma once
#include <ATen/core/ivalue.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "compat.hpp"
#include "hiercoll/communicator.hpp"
#include "hooks.hpp"
#include "recorder.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll_torch {

/// The tensors of one call: those hiercoll reads and writes while it runs, and where its results go. A call's
/// Work owns them until the call completes, then lets them go (staging copies are freed at completion, not
/// when Python drops the Work).
struct CallTensors {
  std::vector<at::Tensor> in_use;  ///< read or written by hiercoll: kept alive while it runs
  /// (caller's tensor, the tensor hiercoll wrote its result to): copied after every operation succeeded.
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_back;

  /// The result for `caller` lands in `written`: copied back unless they are one tensor.
  void result_in(const at::Tensor& caller, const at::Tensor& written) {
    if (!written.is_same(caller)) copy_back.emplace_back(caller, written);
  }
  /// The results for `callers`, laid end to end in `flat` from element `offset`.
  void results_in(const std::vector<at::Tensor>& callers, const at::Tensor& flat, int64_t offset = 0) {
    for (const auto& t : callers) {
      result_in(t, flat.narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  }
  void keep(const at::Tensor& t) {
    if (t.defined()) in_use.push_back(t);
  }
};

class CompletionThread;

/// When the calling thread entered the c10d call it is issuing now (the binding's entry points set it): a Work's
/// duration counts from there, so a small call that completed before its Work was made still has one.
std::chrono::steady_clock::time_point& call_start();

/// The c10d Work of one call: completes, together with its future (what DDP comm hooks wait on), once
/// every hiercoll operation behind the call finished and the results are in the caller's tensors.
///
/// Who completes it: the calling thread where it can (the operations finished before the call returned, or a
/// thread is in wait() when they finish: it waits on hiercoll's own completion and settles the call itself), the
/// CompletionThread otherwise (async calls nobody waits for yet, coalesced calls). Handing a finished call to
/// another thread and back cost tens of microseconds per blocking call where ranks share cores; a blocking call
/// now crosses one thread at most, the progress thread's.
class WorkHiercoll : public c10d::Work {
 public:
  /// `hooks`: the group's, told when the call completes successfully (shared: the group may be gone by then).
  WorkHiercoll(int rank, c10d::OpType type, std::shared_ptr<const GroupHooks> hooks, std::vector<at::Tensor> outputs,
               CallTensors tensors = {});
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override { return outputs_; }
  /// CUDA tensors hiercoll works on in place: wait() orders the current stream after the operations on the
  /// device and returns without blocking the host, as ProcessGroupNCCL's does. Others block until complete.
  bool wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) override;  // 0: c10d's "no timeout"
  void order_streams_after(std::vector<hiercoll::Work> works) { stream_ordered_ = std::move(works); }
  /// Its entry in torch's flight record (recorder.hpp): retired when the call completes successfully.
  void set_record(GroupRecord::Entry entry) { record_ = entry; }
  /// A receive: sourceRank() is the sender `receive` names once complete (what recv from any source returns).
  void set_receive(hiercoll::Work receive) { receive_ = std::move(receive); }
  int sourceRank() const override;
  /// Milliseconds from the call to its completion (what torch's flight recorder writes); only once completed.
  float getDuration() const override;
  bool stream_ordered() const { return !stream_ordered_.empty(); }
  int rank() const { return rank_; }
  std::chrono::steady_clock::time_point started() const { return start_; }
  /// True if the results are where the caller wants them as soon as the operations finish.
  bool in_place() const { return tensors_.copy_back.empty(); }
  /// Once every operation succeeded: copies the results into the caller's tensors. Either way, lets the
  /// call's tensors go. Called once, by the completion thread, before complete().
  void settle_tensors(bool succeeded);
  /// Called once, by a completion runner. `error` is null on success, when the group's completion hooks are told.
  void complete(std::exception_ptr error);

 private:
  friend class CompletionThread;
  static c10::TypePtr list_of_tensors();  // the type of the future's value
  std::shared_ptr<const GroupHooks> hooks_;
  GroupRecord::Entry record_;
  std::chrono::steady_clock::time_point start_;
  float duration_ms_ = -1;  // set once, before the Work is marked completed
  std::vector<at::Tensor> outputs_;
  CallTensors tensors_;
  void settle(c10::ivalue::Future& future);  // completes it as complete() was told to
  std::mutex future_mutex_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // under future_mutex_: made by the first getFuture()
  bool completed_ = false;                          // under future_mutex_: complete() ran, with error_
  std::exception_ptr error_;                        // set once, before completed_
  std::vector<hiercoll::Work> stream_ordered_;
  std::optional<hiercoll::Work> receive_;
  // Set by CompletionThread::add for a call its caller may settle (guarded by the thread's state mutex).
  CompletionThread* completion_ = nullptr;
  void* call_ = nullptr;  // its entry among the calls still running, while it is there
};

/// One thread per process group that turns finished hiercoll operations into completed c10d Works. It sleeps
/// until an operation's completion callback (hiercoll::Work::on_completion, on the progress thread) says that
/// the last operation of a call finished; calls are settled in the order they finish, so a collective is not
/// held up behind an earlier recv still waiting for its sender.
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
    /// A coalesced call (endCoalescing): the calls it gathers, settled before it, in issue order. Their
    /// works are in `works` too.
    std::vector<Pending> members;
  };

  CompletionThread();
  /// Waits for every pending call (each bounded by the communicator's timeout).
  ~CompletionThread();
  /// Takes a call just issued. A call whose operations all finished already is settled and completed here, on
  /// the calling thread, before this returns.
  void add(Pending pending);
  /// WorkHiercoll::wait on host work: waits for the call's operations through hiercoll (not for this thread),
  /// then settles and completes the call on the calling thread. False if the call is not the caller's to settle
  /// (this thread has it already); c10d's wait then waits for that.
  bool wait_in_caller(WorkHiercoll& handle, std::chrono::milliseconds timeout);
  /// Blocks until every call added so far has settled (c10d's waitForPendingWorks).
  void drain();
  /// What the first failed call failed with, if one did (c10d's getError).
  std::optional<hiercoll::ErrorCode> first_failure() const;
  /// What to do once the group has failed (abort the communicator, start torch's abort hooks): set once, before any
  /// call. It runs on this thread after group_failed(), and on whichever thread settles a call that failed after
  /// group_failed(), before that call completes; it must be safe to run more than once, from several threads, and
  /// must not block (torch's abort hooks, which may, run on a thread of their own: GroupHooks::start_abort_hooks).
  void on_group_failure(std::function<void()> task);
  /// The communicator broke (its on_failure callback, from any thread): returns at once.
  void group_failed();
  /// A new communicator replaced the one that broke (reconfigure): the group is healthy again, and getError says
  /// SUCCESS. A failure task already under way finishes; none is due after this.
  void forget_failure();

  /// At interpreter exit: waits until no call is being settled and settles none after. Completing a
  /// future runs (and releases) Python callbacks, which needs the GIL; doing that while Python finalizes
  /// kills the thread mid-destructor. Called for every live CompletionThread by quiesce_all().
  void quiesce();
  static void quiesce_all();

 private:
  struct State;
  static void run(const std::shared_ptr<State>& state);
  /// Copies results out and says how the call ended; the watching thread calls it. `complete` is for a runner.
  static std::exception_ptr settle(const std::shared_ptr<State>& state, Pending& pending);
  /// settle() and complete() on the calling thread (a call its caller claimed).
  void settle_here(Pending& pending);
  static void complete_on_runner(const std::shared_ptr<State>& state, c10::intrusive_ptr<WorkHiercoll> handle,
                                 std::exception_ptr error);
  static void run_runner(const std::shared_ptr<State>& state);

  /// Shared with the operations' completion callbacks, which may outlive this object at interpreter exit, and with
  /// this object's own threads, which may outlive it too (below).
  std::shared_ptr<State> state_;
  std::thread thread_;
};
// The group can be destroyed on one of this object's own threads: torch's abort hook, run by the failure task on the
// watching thread, or a future's callback on a runner, may drop the last reference to it (and so to this object).
// The threads therefore work on the shared State alone, never on `this`, and the destructor leaves the thread it
// runs on to finish by itself rather than join it.

/// The error torch raises for a hiercoll::Error in operation `op` on `rank`. Its text leads with the phrase gloo
/// uses in the same situation, which PyTorch's own tests, torchelastic and log scrapers look for ("Timed out waiting",
/// "Connection closed by peer"), then gives hiercoll's detail (who, which operation, how long):
///   [hiercoll rank 0, ALLREDUCE] Connection closed by peer rank 1: allreduce(...) [hier]: rank 1 (pid 7) died: ...
/// A lost peer raises DistNetworkError, other failures of the group DistBackendError (as ProcessGroupNCCL's), usage
/// errors c10::Error; in Python all are RuntimeError.
[[noreturn]] void throw_as_torch(const hiercoll::Error& error, const std::string& op, int rank);
/// throw_as_torch's error as an exception_ptr, for a hiercoll::Error; any other error passes unchanged.
std::exception_ptr as_torch_error(std::exception_ptr error, const std::string& op, int rank);

}  // namespace hiercoll_torch
