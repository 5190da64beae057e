#pragma once
#include <atomic>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>

#include "compat.hpp"
#include "completion.hpp"
#include "recorder.hpp"
#include "hiercoll/communicator.hpp"

namespace hiercoll_torch {

/// torch.distributed backend "hiercoll": each c10d call becomes hiercoll operations on one Communicator.
/// Calls return at once; the Work (and its future) completes on the completion thread.
///
/// CPU tensors are used in place. CUDA tensors are used in place too, ordered after the caller's current stream,
/// when hiercoll has its device path (HIERCOLL_WITH_CUDA) and torch has CUDA: allreduce, broadcast, reduce,
/// all_gather_into_tensor, reduce_scatter_tensor and even all_to_all_single; the calls built from point-to-point
/// messages (gather, scatter, uneven all_to_all, send/recv) and list forms stage them through host memory.
class ProcessGroupHiercoll : public compat::BackendBase {
 public:
  /// Joins the group through `store`. `global_ranks`: the members' ranks in the default group, by group rank
  /// (torch's flight recorder names the dump files by them); empty when not known. `deferred` (torch's
  /// enable_reconfigure): no communicator until reconfigure() makes one.
  ProcessGroupHiercoll(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::milliseconds timeout,
                       std::string name = "world", std::vector<uint64_t> global_ranks = {}, bool deferred = false);
  ~ProcessGroupHiercoll() override;

  const std::string getBackendName() const override { return "hiercoll"; }
  c10::intrusive_ptr<Options> getBackendOptions() HIERCOLL_OVERRIDE_SINCE_2_9;
  void setTimeout(std::chrono::milliseconds timeout) HIERCOLL_OVERRIDE_SINCE_2_9;

  // Coalescing: the calls between start and end complete together, as one Work (batch_isend_irecv, and
  // `dist._coalescing_manager`, whose all_reduce/all_gather_into_tensor/reduce_scatter_tensor arrive fused).
  bool supportsCoalescing() const HIERCOLL_OVERRIDE_SINCE_2_7 { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

#if HIERCOLL_TORCH_HAS_BACKEND_SPLIT
  // A communicator for a subset of this group's ranks, joined through `store` (ProcessGroup::split_group,
  // DeviceMesh). Ranks outside `ranks` get nullptr, as with ncclCommSplit's NO_COLOR.
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                    const c10::intrusive_ptr<Options>& opts) override;
#endif

  // torch's flight recorder (attached by default to every group of a backend without its own, torch >= 2.15):
  // completion hooks retire its entries with their durations, abort hooks dump its record when the group fails.
#if HIERCOLL_TORCH_HAS_HOOKS
  bool supportsCompletionHooks() const override { return true; }
  void registerCompletionHook(int64_t hook_id, c10d::CompletionHook hook) override;
  void unregisterCompletionHook(int64_t hook_id) override;
  bool supportsAbortHooks() const override { return true; }
  void registerAbortHook(int64_t hook_id, c10d::AbortHook hook) override;
  void unregisterAbortHook(int64_t hook_id) override;
#endif

  // Fault tolerance. shrink: a new group without the excluded ranks (dist.shrink_group); merge: a new group over
  // another store. reconfigure: this group's communicator replaced by one over the ranks whose handles are given
  // (grow, shrink, split or merge by handles; torch's enable_reconfigure makes a group that has none until then).
#if HIERCOLL_TORCH_HAS_SHRINK
  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<Backend> shrink(const std::vector<int64_t>& ranks_to_exclude, int shrink_flags = 0,
                                     const c10::intrusive_ptr<Options>& opts_override = nullptr) override;
  c10::intrusive_ptr<Backend> merge(const c10::intrusive_ptr<c10d::Store>& store,
                                    const c10::intrusive_ptr<Options>& opts, const int& rank,
                                    const int& size) override;
#endif
#if HIERCOLL_TORCH_HAS_RECONFIGURE
  bool supportsReconfigure() const override { return true; }
  c10d::ReconfigureHandle get_reconfigure_handle() const override;
  c10::intrusive_ptr<c10d::Work> reconfigure(const c10d::ReconfigureOptions& opts) override;
  bool isInitialized() HIERCOLL_OVERRIDE_SINCE_2_15 { return comm_ != nullptr; }
#endif

  // Lifecycle and health. A group whose communicator fails (a timeout, a peer that died or aborted) runs its abort
  // hooks and aborts the communicator, which its peers hear at once. abort() asked for runs no hooks.
#if HIERCOLL_TORCH_HAS_BACKEND_LIFECYCLE
  c10d::ErrorType getError() override;
  void abort() override;
  void shutdown() override;
#endif
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;
  void waitForPendingWorks() override;
  // Rank 0 waits for every other rank in turn and names the ones that did not arrive within the timeout.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  // Dense tensors through hiercoll's allreduce; sparse COO tensors (DDP's gradients of nn.Embedding(sparse=True))
  // as gloo reduces them: every rank's indices and values allgathered and summed (allreduce_sparse_coo).
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  // The `_single` calls under their canonical names; torch releases before them call the old names, which forward.
  c10::intrusive_ptr<c10d::Work> all_gather_single(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) HIERCOLL_OVERRIDE_SINGLE;
#if !HIERCOLL_TORCH_HAS_SINGLE_NAMES
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override {
    return all_gather_single(output, input, opts);
  }
#endif
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) HIERCOLL_OVERRIDE_SINGLE;
#if !HIERCOLL_TORCH_HAS_SINGLE_NAMES
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override {
    return all_gather_single_coalesced(outputs, inputs, opts);
  }
#endif
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
#if HIERCOLL_TORCH_HAS_GATHER_SINGLE
  c10::intrusive_ptr<c10d::Work> gather_single(at::Tensor& output, at::Tensor& input,
                                               const c10d::GatherOptions& opts = c10d::GatherOptions())
      HIERCOLL_OVERRIDE_GATHER_SINGLE;
#if !HIERCOLL_TORCH_HAS_GATHER_SINGLE_NAME
  c10::intrusive_ptr<c10d::Work> gather_into_tensor(at::Tensor& output, at::Tensor& input,
                                                    const c10d::GatherOptions& opts = c10d::GatherOptions()) override {
    return gather_single(output, input, opts);
  }
#endif
#endif
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) HIERCOLL_OVERRIDE_SINGLE;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) HIERCOLL_OVERRIDE_SINGLE;
  c10::intrusive_ptr<c10d::Work> all_to_all_single(at::Tensor& output, at::Tensor& input,
                                                   std::vector<int64_t>& output_split_sizes,
                                                   std::vector<int64_t>& input_split_sizes,
                                                   const c10d::AllToAllOptions& opts = c10d::AllToAllOptions())
      HIERCOLL_OVERRIDE_SINGLE;
#if !HIERCOLL_TORCH_HAS_SINGLE_NAMES
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override {
    return reduce_scatter_single(output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override {
    return reduce_scatter_single_coalesced(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override {
    return all_to_all_single(output, input, output_split_sizes, input_split_sizes, opts);
  }
#endif
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  hiercoll::Communicator& communicator() { return comm(); }
  /// torch's flight record of this group's calls, where this adapter records natively (recorder.hpp); else null.
  GroupRecord* flight_record() { return record_.get(); }

 private:
  c10::intrusive_ptr<c10d::Work> allreduce_sparse_coo(std::vector<at::Tensor>& tensors,
                                                      const c10d::AllreduceOptions& opts);
  // `tensors`: every tensor hiercoll reads or writes that the caller does not hold (host copies of CUDA tensors,
  // fused buffers), and where results go; the Work owns them until it completes.
  // `inputs`: what the call reads, as torch's flight record lists it (empty: the outputs, as in place).
  c10::intrusive_ptr<c10d::Work> submit(c10d::OpType type, std::vector<hiercoll::Work> works,
                                        std::vector<at::Tensor> outputs, CallTensors tensors = {},
                                        const std::vector<at::Tensor>& inputs = {});
  // Hands an issued call to the completion thread, or to the open coalescing block.
  void enqueue(CompletionThread::Pending pending);
  // Runs `calls` (issuing collectives) and returns one Work for all of them.
  c10::intrusive_ptr<c10d::Work> coalesced(c10d::OpType type, const std::function<void()>& calls);
  c10::intrusive_ptr<c10d::Work> add_combined(c10d::OpType type, std::vector<CompletionThread::Pending> members);
  // Point-to-point exchanges inside one collective (alltoall, gather, scatter) on a tag users cannot pick.
  std::vector<hiercoll::Work> exchange(const std::vector<at::Tensor>& to_peer,
                                       const std::vector<at::Tensor>& from_peer);
  // A receive from `peer` (or kAnySource) whose Work knows its sender.
  c10::intrusive_ptr<c10d::Work> receive(std::vector<at::Tensor>& tensors, int peer, int tag, c10d::OpType type);
  // Every rank's input to parts[i] on root (parts empty elsewhere); the Work's result() is `result`.
  c10::intrusive_ptr<c10d::Work> gather_to_root(const at::Tensor& input, std::vector<at::Tensor> parts, int root,
                                                std::vector<at::Tensor> result);

  // After the communicator failed: abort, then torch's abort hooks (on the completion thread, or on the thread that
  // settles a failed call first). A failure of a communicator that reconfigure() has replaced since does neither.
  void after_failure();
  // Aborts the communicator once, whoever asks (a failure, the program, a shrink); a caller that finds another's
  // abort under way returns when it has finished, so that no call is issued on a communicator half aborted.
  // `generation`: only if comm_ is still that communicator; false (nothing done) if it is not.
  bool abort_communicator(std::optional<uint64_t> generation = std::nullopt);
  // Replaces comm_ (reconfigure, shutdown) and returns the old one, whose failures no longer reach completion_.
  std::unique_ptr<hiercoll::Communicator> replace_communicator(std::unique_ptr<hiercoll::Communicator> next);

  // A communicator over `store` for rank `rank` of `size`, whose failures reach completion_ as `generation`'s.
  std::unique_ptr<hiercoll::Communicator> connect(std::shared_ptr<hiercoll::Store> store, int rank, int size,
                                                  std::chrono::milliseconds timeout, uint64_t generation);
  // The group's communicator; raises if it has none yet (a deferred group before reconfigure()).
  hiercoll::Communicator& comm();

  std::chrono::milliseconds timeout_;
  const std::string name_;
  const c10::intrusive_ptr<c10d::Store> store_;  // torch's, for groups made from this one (split, shrink, reconfigure)
  std::vector<uint64_t> global_ranks_;           // changed by reconfigure() only
  const uint64_t nonce_;                         // makes this group's reconfigure handle unique across hosts
  int64_t reconfigure_uuid_ = -1;                // of the last reconfigure()
  int shrinks_ = 0;                              // groups shrunk from this one, for their names
  // Shared with the Works, which tell it as they complete, and with a failure task under way, which the group's
  // last reference may leave from inside a hook.
  const std::shared_ptr<GroupHooks> hooks_ = std::make_shared<GroupHooks>();
  // torch's flight record of this group's calls (recorder.hpp); replaced by reconfigure(), between calls only.
  std::unique_ptr<GroupRecord> record_;
  std::mutex abort_mutex_;
  bool communicator_aborted_ = false;  // under abort_mutex_: comm_ was aborted (after a failure, or asked to)
  uint64_t generation_ = 0;            // under abort_mutex_: which communicator comm_ is (reconfigure counts up)
  std::atomic<uint64_t> failed_generation_{0};  // the communicator whose failure completion_ heard last
  std::atomic<bool> shut_down_{false};          // shutdown() said goodbye: the group has no communicator now
  std::atomic<uint64_t> sequence_{0};  // collectives issued: torch compares it across ranks to spot a desync
  std::atomic<uint64_t> p2p_sequence_{0};  // point-to-point calls issued (the flight record's p2p_seq_id)
  // The abort hook that dumps the group's own flight record (recorder.hpp), below any id torch hands out.
  static constexpr int64_t kDumpHook = std::numeric_limits<int64_t>::min();
  void record_ahead(c10d::OpType type, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs);
  // A monitored barrier failed: it left messages posted that no peer will match, which shutdown and the destructor
  // abort instead of waiting the group's whole timeout for them.
  std::atomic<bool> barrier_failed_{false};
  bool coalescing_ = false;
  std::vector<CompletionThread::Pending> coalesced_;  // the calls since startCoalescing
  std::unique_ptr<hiercoll::Communicator> comm_;  // replaced by reconfigure(), between calls only
  CompletionThread completion_;  // declared after comm_: destroyed first, so pending calls drain before the comm goes
};

/// What `Backend.register_backend` calls: joins the group through torch's store.
c10::intrusive_ptr<compat::BackendBase> create_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                       std::chrono::milliseconds timeout,
                                                       const std::string& name = "world",
                                                       std::vector<uint64_t> global_ranks = {}, bool deferred = false);

}  // namespace hiercoll_torch
