#include "process_group.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <utility>

#include "hiercoll/errors.hpp"
#include "issue.hpp"
#include "tensors.hpp"
#include "torch_store.hpp"

namespace hiercoll_torch {

ProcessGroupHiercoll::ProcessGroupHiercoll(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                           std::chrono::milliseconds timeout, std::string name,
                                           std::vector<uint64_t> global_ranks, bool deferred)
    : compat::BackendBase(rank, size),
      timeout_(timeout),
      name_(std::move(name)),
      store_(std::move(store)),
      global_ranks_(std::move(global_ranks)),
      nonce_(std::random_device()()) {
  completion_.on_group_failure([this] { after_failure(); });
  if (GroupRecord::native()) {
    record_ = std::make_unique<GroupRecord>(rank, global_ranks_, timeout);
    // torch attaches no hook to a group that records itself, so none would dump the record on failure: this does.
    hooks_->add_abort(kDumpHook, [] { GroupRecord::dump(); });
  }
  if (!deferred) comm_ = connect(std::make_shared<TorchStore>(store_), rank, size, timeout, generation_);
}

// Before the call is issued, as torch's own hook records: a small collective runs to its end (or its failure, whose
// abort hooks dump the record) on the caller's thread inside the issue. The entry waits on this thread for submit().
void ProcessGroupHiercoll::record_ahead(c10d::OpType type, const std::vector<at::Tensor>& inputs,
                                        const std::vector<at::Tensor>& outputs) {
  if (record_) GroupRecord::stash(record_->record(*this, type, sequence_ + 1, false, inputs, outputs));
}

ProcessGroupHiercoll::~ProcessGroupHiercoll() {
  if (!comm_) return;
  comm_->on_failure({});  // returns once a call in progress has: none reaches completion_ after this
  if (barrier_failed_) abort_communicator();
}

std::unique_ptr<hiercoll::Communicator> ProcessGroupHiercoll::connect(std::shared_ptr<hiercoll::Store> store, int rank,
                                                                      int size, std::chrono::milliseconds timeout,
                                                                      uint64_t generation) {
  hiercoll::CommOptions options = hiercoll::CommOptions::from_env();
  options.timeout = timeout;  // HIERCOLL_TIMEOUT_MS, if set, still wins (the communicator applies it)
  options.name = name_;
  auto comm = std::make_unique<hiercoll::Communicator>(
      hiercoll::Communicator::create(std::move(store), rank, size, options));
  comm->on_failure([this, generation](hiercoll::ErrorCode, const std::string&) {
    failed_generation_.store(generation);
    completion_.group_failed();
  });
  return comm;
}

std::unique_ptr<hiercoll::Communicator> ProcessGroupHiercoll::replace_communicator(
    std::unique_ptr<hiercoll::Communicator> next) {
  std::unique_ptr<hiercoll::Communicator> old;
  {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    old = std::exchange(comm_, std::move(next));
    ++generation_;
    communicator_aborted_ = false;
  }
  if (old) old->on_failure({});  // waits for a callback in progress; none reaches completion_ after this
  completion_.forget_failure();
  hooks_->rearm_abort_hooks();
  return old;
}

hiercoll::Communicator& ProcessGroupHiercoll::comm() {
  TORCH_CHECK(!shut_down_, "hiercoll: this group was shut down (destroy_process_group)");
  TORCH_CHECK(comm_ != nullptr, "hiercoll: this group was made to be reconfigured (enable_reconfigure) and has no ",
              "members yet: call reconfigure() on every rank first");
  return *comm_;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::submit(c10d::OpType type, std::vector<hiercoll::Work> works,
                                                            std::vector<at::Tensor> outputs, CallTensors tensors,
                                                            const std::vector<at::Tensor>& inputs) {
  // Collectives only, as ProcessGroupNCCL's seqCollective_: ranks issue different point-to-point calls.
  const bool p2p = type == c10d::OpType::SEND || type == c10d::OpType::RECV || type == c10d::OpType::RECVANYSOURCE;
  const uint64_t sequence = p2p ? ++p2p_sequence_ : ++sequence_;
  auto handle = c10::make_intrusive<WorkHiercoll>(rank_, type, hooks_, outputs, std::move(tensors));
  if (record_) {
    GroupRecord::Entry entry;
    if (!GroupRecord::take_stashed(entry))
      entry = record_->record(*this, type, sequence, p2p, inputs.empty() ? outputs : inputs, outputs);
    handle->set_record(entry);
  }
  // In place on CUDA tensors with nothing to copy afterwards: wait() orders streams instead of blocking.
  bool in_place = handle->in_place() && !outputs.empty();
  for (const auto& t : outputs) in_place = in_place && on_device(t);
  if (in_place) handle->order_streams_after(works);
  CompletionThread::Pending pending{std::move(works), handle, {}};
  enqueue(std::move(pending));
  return handle;
}

void ProcessGroupHiercoll::enqueue(CompletionThread::Pending pending) {
  if (coalescing_) {
    coalesced_.push_back(std::move(pending));
  } else {
    completion_.add(std::move(pending));
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::broadcast(std::vector<at::Tensor>& tensors,
                                                               const c10d::BroadcastOptions& opts) {
  return issue("broadcast", rank_, [&] {
    at::Tensor t = single(tensors, "broadcast");
    check_rank(opts.rootRank, size_, "root", "broadcast");
    at::Tensor h = working(t);
    record_ahead(c10d::OpType::BROADCAST, tensors, tensors);
    auto work =
        comm().broadcast(h.data_ptr(), h.data_ptr(), h.numel(), data_type(t, "broadcast"), opts.rootRank, stream_of(t));
    return submit(c10d::OpType::BROADCAST, {work}, tensors, staged(t, h));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::allreduce(std::vector<at::Tensor>& tensors,
                                                               const c10d::AllreduceOptions& opts) {
  if (tensors.size() == 1 && tensors[0].defined() && tensors[0].is_sparse()) return allreduce_sparse_coo(tensors, opts);
  return issue("allreduce", rank_, [&] {
    at::Tensor t = single(tensors, "allreduce");
    at::Tensor h = working(t);
    premultiply_(h, opts.reduceOp);
    record_ahead(c10d::OpType::ALLREDUCE, tensors, tensors);
    auto work = comm().allreduce(h.data_ptr(), h.data_ptr(), h.numel(), data_type(t, "allreduce"),
                                reduce_op(opts.reduceOp, t, "allreduce"), stream_of(t));
    return submit(c10d::OpType::ALLREDUCE, {work}, tensors, staged(t, h));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                                      const c10d::AllreduceOptions& opts) {
  return allreduce_sparse_coo(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::allreduce_sparse_coo(std::vector<at::Tensor>& tensors,
                                                                          const c10d::AllreduceOptions& opts) {
  // As gloo: each rank's coalesced tensor goes to every rank (its indices and values allgathered, padded to the
  // largest count of entries), and each sums them all in rank order and coalesces, so every rank holds the same
  // sparse tensor. In three allgathers on the calling thread: the shape, then indices, then values; the Work it
  // returns is finished.
  return issue("allreduce", rank_, [&] {
    TORCH_CHECK(tensors.size() == 1, "hiercoll allreduce: expects exactly one tensor per process, got ",
                tensors.size());
    at::Tensor& t = tensors[0];
    TORCH_CHECK(t.layout() == at::kSparse, "hiercoll allreduce: sparse tensors must be COO, got ", t.layout());
    TORCH_CHECK(opts.reduceOp == c10d::ReduceOp::SUM, "hiercoll allreduce: sparse tensors reduce with SUM only");
    const at::Tensor input = t.coalesce().cpu();
    const int64_t sparse_dims = input.sparse_dim(), dims = input.dim();
    auto gather = [&](const at::Tensor& mine) {  // contiguous CPU tensor -> [size_, mine's shape...]
      std::vector<int64_t> shape{size_};
      for (int64_t d : mine.sizes()) shape.push_back(d);
      at::Tensor all = at::empty(shape, mine.options());
      comm().allgather(mine.data_ptr(), all.data_ptr(), mine.numel(), data_type(mine, "allreduce")).wait();
      return all;
    };
    // Every rank's entry count and shape; ranks that disagree on the shape all fail, naming it.
    std::vector<int64_t> header{input._nnz(), sparse_dims, dims};
    for (int64_t d : input.sizes()) header.push_back(d);
    const at::Tensor head = at::tensor(std::vector<int64_t>{dims}, at::kLong);
    const at::Tensor ranks_dims = gather(head);
    TORCH_CHECK(ranks_dims.eq(dims).all().item<bool>(), "hiercoll allreduce: ranks hold sparse tensors of different "
                "dimensions: ", ranks_dims.flatten());
    const at::Tensor headers = gather(at::tensor(header, at::kLong));
    TORCH_CHECK(headers.slice(1, 1).eq(headers[rank_].slice(0, 1)).all().item<bool>(),
                "hiercoll allreduce: ranks hold sparse tensors of different shapes or sparse dimensions "
                "([entries, sparse dims, dims, sizes...] per rank): ", headers);
    const at::Tensor counts = headers.select(1, 0);
    const int64_t most = counts.max().item<int64_t>();
    at::Tensor indices = at::zeros({sparse_dims, most}, at::kLong);
    indices.narrow(1, 0, input._nnz()).copy_(input._indices());
    std::vector<int64_t> value_shape{most};
    for (int64_t d = sparse_dims; d < dims; ++d) value_shape.push_back(input.size(d));
    at::Tensor values = at::zeros(value_shape, input._values().options());
    values.narrow(0, 0, input._nnz()).copy_(input._values());
    const at::Tensor all_indices = gather(indices), all_values = gather(values);
    std::vector<at::Tensor> index_parts, value_parts;
    for (int r = 0; r < size_; ++r) {
      const int64_t n = counts[r].item<int64_t>();
      index_parts.push_back(all_indices[r].narrow(1, 0, n));
      value_parts.push_back(all_values[r].narrow(0, 0, n));
    }
    at::Tensor sum = at::sparse_coo_tensor(at::cat(index_parts, 1), at::cat(value_parts, 0), input.sizes(),
                                           input.options())
                         .coalesce();
    t.copy_(sum.to(t.device()));
    return submit(c10d::OpType::ALLREDUCE, {}, tensors);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                         const c10d::AllreduceCoalescedOptions& opts) {
  return issue("allreduce_coalesced", rank_, [&] {
    TORCH_CHECK(!tensors.empty(), "hiercoll allreduce_coalesced: no tensors");
    std::vector<at::Tensor> flat;
    for (const auto& t : tensors) {
      check_tensor(t, "allreduce_coalesced");
      check_same_kind(t, tensors[0], "allreduce_coalesced");
      flat.push_back(host(t).reshape({-1}));
    }
    at::Tensor fused = at::cat(flat);
    premultiply_(fused, opts.reduceOp);
    record_ahead(c10d::OpType::ALLREDUCE_COALESCED, tensors, tensors);
    auto work =
        comm().allreduce(fused.data_ptr(), fused.data_ptr(), fused.numel(), data_type(tensors[0], "allreduce_coalesced"),
                        reduce_op(opts.reduceOp, tensors[0], "allreduce_coalesced"));
    CallTensors results;
    results.results_in(tensors, fused);
    return submit(c10d::OpType::ALLREDUCE_COALESCED, {work}, tensors, std::move(results));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::reduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::ReduceOptions& opts) {
  return issue("reduce", rank_, [&] {
    at::Tensor t = single(tensors, "reduce");
    check_rank(opts.rootRank, size_, "root", "reduce");
    at::Tensor h = working(t);
    at::Tensor in = premultiplied(h, opts.reduceOp);
    record_ahead(c10d::OpType::REDUCE, tensors, tensors);
    auto work = comm().reduce(in.data_ptr(), h.data_ptr(), h.numel(), data_type(t, "reduce"),
                             reduce_op(opts.reduceOp, t, "reduce"), opts.rootRank, stream_of(t));
    const bool root = opts.rootRank == rank_;
    return submit(c10d::OpType::REDUCE, {work}, tensors, root ? staged(t, h, {in}) : keeping({h, in}));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                               std::vector<at::Tensor>& inputs,
                                                               const c10d::AllgatherOptions&) {
  return issue("allgather", rank_, [&] {
    at::Tensor in = single(inputs, "allgather");
    TORCH_CHECK(outputs.size() == 1, "hiercoll allgather: expects one output list per process, got ", outputs.size());
    auto& outs = outputs[0];
    TORCH_CHECK(static_cast<int>(outs.size()) == size_, "hiercoll allgather: the output list has ", outs.size(),
                " tensors, the group has ", size_, " ranks");
    for (const auto& o : outs) {
      check_same_kind(o, in, "allgather");
      TORCH_CHECK(o.numel() == in.numel(), "hiercoll allgather: output tensors must have the input's ", in.numel(),
                  " elements, one has ", o.numel());
    }
    at::Tensor h = host(in);
    at::Tensor gathered = at::empty({size_ * in.numel()}, h.options());
    record_ahead(c10d::OpType::ALLGATHER, inputs, outs);
    auto work = comm().allgather(h.data_ptr(), gathered.data_ptr(), in.numel(), data_type(in, "allgather"));
    CallTensors results;
    results.keep(h);
    results.results_in(outs, gathered);  // each output has the input's size
    return submit(c10d::OpType::ALLGATHER, {work}, outs, std::move(results), {in});
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::all_gather_single(at::Tensor& output, at::Tensor& input,
                                                                     const c10d::AllgatherOptions&) {
  return issue("all_gather_single", rank_, [&] {
    check_tensor(input, "all_gather_into_tensor");
    check_tensor(output, "all_gather_into_tensor");
    check_same_kind(input, output, "all_gather_into_tensor");
    TORCH_CHECK(output.numel() == size_ * input.numel(), "hiercoll all_gather_into_tensor: output has ", output.numel(),
                " elements, expected world size x input = ", size_ * input.numel());
    at::Tensor hin = working(input);
    at::Tensor hout = working(output);
    record_ahead(c10d::OpType::_ALLGATHER_BASE, {input}, {output});
    auto work = comm().allgather(hin.data_ptr(), hout.data_ptr(), input.numel(), data_type(input, "allgather"),
                                stream_of(output));
    return submit(c10d::OpType::_ALLGATHER_BASE, {work}, {output}, staged(output, hout, {hin}), {input});
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::all_gather_single_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "hiercoll all_gather_into_tensor_coalesced: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  return coalesced(c10d::OpType::COALESCED, [&] {
    for (size_t i = 0; i < inputs.size(); ++i) all_gather_single(outputs[i], inputs[i], opts);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  return issue("allgather_coalesced", rank_, [&] {
    // One allgather of every input laid end to end; output_lists[r][i] receives rank r's inputs[i].
    TORCH_CHECK(!inputs.empty(), "hiercoll all_gather_coalesced: no input tensors");
    TORCH_CHECK(static_cast<int>(output_lists.size()) == size_, "hiercoll all_gather_coalesced: ", output_lists.size(),
                " output lists, the group has ", size_, " ranks");
    std::vector<at::Tensor> flat;
    for (const auto& in : inputs) {
      check_tensor(in, "all_gather_coalesced");
      check_same_kind(in, inputs[0], "all_gather_coalesced");
      flat.push_back(host(in).reshape({-1}));
    }
    for (const auto& outs : output_lists) {
      TORCH_CHECK(outs.size() == inputs.size(), "hiercoll all_gather_coalesced: an output list has ", outs.size(),
                  " tensors for ", inputs.size(), " inputs");
      for (size_t i = 0; i < outs.size(); ++i) {
        check_tensor(outs[i], "all_gather_coalesced");
        check_same_kind(outs[i], inputs[0], "all_gather_coalesced");
        TORCH_CHECK(outs[i].numel() == inputs[i].numel(), "hiercoll all_gather_coalesced: output ", i, " has ",
                    outs[i].numel(), " elements, input ", i, " has ", inputs[i].numel());
      }
    }
    at::Tensor fused = at::cat(flat);
    at::Tensor gathered = at::empty({size_ * fused.numel()}, fused.options());
    auto work = comm().allgather(fused.data_ptr(), gathered.data_ptr(), fused.numel(),
                                data_type(inputs[0], "all_gather_coalesced"));
    std::vector<at::Tensor> results;
    for (const auto& outs : output_lists) results.insert(results.end(), outs.begin(), outs.end());
    CallTensors tensors;
    tensors.keep(fused);
    for (size_t r = 0; r < output_lists.size(); ++r) {
      tensors.results_in(output_lists[r], gathered, static_cast<int64_t>(r) * fused.numel());
    }
    return submit(c10d::OpType::ALLGATHER_COALESCED, {work}, results, std::move(tensors));
  });
}


c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                    std::vector<std::vector<at::Tensor>>& inputs,
                                                                    const c10d::ReduceScatterOptions& opts) {
  return issue("reduce_scatter", rank_, [&] {
    at::Tensor out = single(outputs, "reduce_scatter");
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                "hiercoll reduce_scatter: expects one input list of ", size_, " tensors");
    std::vector<at::Tensor> flat;
    for (const auto& in : inputs[0]) {
      check_tensor(in, "reduce_scatter");
      check_same_kind(in, out, "reduce_scatter");
      TORCH_CHECK(in.numel() == out.numel(), "hiercoll reduce_scatter: input tensors must have the output's ",
                  out.numel(), " elements, one has ", in.numel());
      flat.push_back(host(in).reshape({-1}));
    }
    at::Tensor fused = at::cat(flat);
    premultiply_(fused, opts.reduceOp);
    at::Tensor hout = host(out);
    record_ahead(c10d::OpType::REDUCE_SCATTER, inputs[0], outputs);
    auto work = comm().reduce_scatter(fused.data_ptr(), hout.data_ptr(), out.numel(), data_type(out, "reduce_scatter"),
                                     reduce_op(opts.reduceOp, out, "reduce_scatter"));
    return submit(c10d::OpType::REDUCE_SCATTER, {work}, outputs, staged(out, hout, {fused}), inputs[0]);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::reduce_scatter_single(at::Tensor& output, at::Tensor& input,
                                                                          const c10d::ReduceScatterOptions& opts) {
  return issue("reduce_scatter_single", rank_, [&] {
    check_tensor(input, "reduce_scatter_tensor");
    check_tensor(output, "reduce_scatter_tensor");
    check_same_kind(input, output, "reduce_scatter_tensor");
    TORCH_CHECK(input.numel() == size_ * output.numel(), "hiercoll reduce_scatter_tensor: input has ", input.numel(),
                " elements, expected world size x output = ", size_ * output.numel());
    at::Tensor hin = premultiplied(working(input), opts.reduceOp);
    at::Tensor hout = working(output);
    record_ahead(c10d::OpType::_REDUCE_SCATTER_BASE, {input}, {output});
    auto work =
        comm().reduce_scatter(hin.data_ptr(), hout.data_ptr(), output.numel(), data_type(output, "reduce_scatter"),
                             reduce_op(opts.reduceOp, output, "reduce_scatter_tensor"), stream_of(output));
    return submit(c10d::OpType::_REDUCE_SCATTER_BASE, {work}, {output}, staged(output, hout, {hin}), {input});
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::reduce_scatter_single_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "hiercoll reduce_scatter_tensor_coalesced: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  return coalesced(c10d::OpType::COALESCED, [&] {
    for (size_t i = 0; i < inputs.size(); ++i) reduce_scatter_single(outputs[i], inputs[i], opts);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::all_to_all_single(at::Tensor& output, at::Tensor& input,
                                                                   std::vector<int64_t>& output_split_sizes,
                                                                   std::vector<int64_t>& input_split_sizes,
                                                                   const c10d::AllToAllOptions&) {
  return issue("all_to_all_single", rank_, [&] {
    check_tensor(input, "all_to_all_single");
    check_tensor(output, "all_to_all_single");
    check_same_kind(input, output, "all_to_all_single");
    TORCH_CHECK(input.data_ptr() != output.data_ptr() || input.numel() == 0,
                "hiercoll all_to_all_single: input and output must be different tensors");
    if (input_split_sizes.empty() && output_split_sizes.empty()) {
      TORCH_CHECK(input.numel() % size_ == 0, "hiercoll all_to_all_single: ", input.numel(),
                  " elements do not split evenly over ", size_, " ranks");
      TORCH_CHECK(output.numel() == input.numel(), "hiercoll all_to_all_single: output has ", output.numel(),
                  " elements, input ", input.numel());
      at::Tensor hin = working(input), hout = working(output);
      record_ahead(c10d::OpType::ALLTOALL_BASE, {input}, {output});
      auto work = comm().alltoall(hin.data_ptr(), hout.data_ptr(), input.numel() / size_, data_type(input, "alltoall"),
                                 stream_of(output));
      return submit(c10d::OpType::ALLTOALL_BASE, {work}, {output}, staged(output, hout, {hin}), {input});
    }

    at::Tensor hin = host(input);
    at::Tensor hout = host(output);
    // Uneven splits, along the first dimension, as torch.distributed.all_to_all_single defines them.
    auto splits = [&](std::vector<int64_t> sizes, const at::Tensor& t, const char* which) {
      const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
      if (sizes.empty()) {
        TORCH_CHECK(rows % size_ == 0, "hiercoll all_to_all_single: ", which, " has ", rows,
                    " rows, which do not split evenly over ", size_, " ranks");
        sizes.assign(size_, rows / size_);
      }
      TORCH_CHECK(static_cast<int>(sizes.size()) == size_, "hiercoll all_to_all_single: ", which, " split sizes have ",
                  sizes.size(), " entries, the group has ", size_, " ranks");
      TORCH_CHECK(std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) == rows,
                  "hiercoll all_to_all_single: ", which, " split sizes do not add up to its ", rows, " rows");
      std::vector<at::Tensor> parts;
      const int64_t row_elements = rows == 0 ? 0 : t.numel() / rows;
      int64_t offset = 0;
      for (int64_t rows_for_peer : sizes) {
        parts.push_back(t.reshape({-1}).narrow(0, offset * row_elements, rows_for_peer * row_elements));
        offset += rows_for_peer;
      }
      return parts;
    };
    auto works = exchange(splits(input_split_sizes, hin, "input"), splits(output_split_sizes, hout, "output"));
    return submit(c10d::OpType::ALLTOALL_BASE, std::move(works), {output}, staged(output, hout, {hin}), {input});
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::barrier(const c10d::BarrierOptions&) {
  return issue("barrier", rank_, [&] {
    record_ahead(c10d::OpType::BARRIER, {}, {});
    return submit(c10d::OpType::BARRIER, {comm().barrier()}, {});
  });
}


// ---- Coalescing ------------------------------------------------------------------------------------------

void ProcessGroupHiercoll::startCoalescing() {
  TORCH_CHECK(!coalescing_, "hiercoll startCoalescing: already coalescing (an endCoalescing is missing)");
  coalescing_ = true;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::endCoalescing() {
  TORCH_CHECK(coalescing_, "hiercoll endCoalescing: no startCoalescing before it");
  coalescing_ = false;
  return add_combined(c10d::OpType::COALESCED, std::exchange(coalesced_, {}));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::coalesced(c10d::OpType type, const std::function<void()>& calls) {
  // Inside a user's coalescing block the combined call joins that block's list.
  auto outer = std::exchange(coalesced_, {});
  const bool outer_coalescing = std::exchange(coalescing_, true);
  try {
    calls();
  } catch (...) {
    // The calls issued so far still run: settle them with the outer block (or on their own).
    auto issued = std::exchange(coalesced_, std::move(outer));
    coalescing_ = outer_coalescing;
    for (auto& pending : issued) {
      enqueue(std::move(pending));
    }
    throw;
  }
  auto members = std::exchange(coalesced_, std::move(outer));
  coalescing_ = outer_coalescing;
  return add_combined(type, std::move(members));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::add_combined(c10d::OpType type,
                                                                  std::vector<CompletionThread::Pending> members) {
  std::vector<hiercoll::Work> works;
  std::vector<at::Tensor> outputs;
  bool stream_ordered = !members.empty();
  for (auto& member : members) {
    works.insert(works.end(), member.works.begin(), member.works.end());
    auto results = member.handle->result();
    outputs.insert(outputs.end(), results.begin(), results.end());
    stream_ordered = stream_ordered && member.handle->stream_ordered();
  }
  // The block's duration counts from its first call.
  if (!members.empty()) call_start() = members.front().handle->started();
  auto handle = c10::make_intrusive<WorkHiercoll>(rank_, type, hooks_, outputs);
  if (stream_ordered) handle->order_streams_after(works);
  CompletionThread::Pending pending{std::move(works), handle, std::move(members)};
  enqueue(std::move(pending));
  return handle;
}

}  // namespace hiercoll_torch
