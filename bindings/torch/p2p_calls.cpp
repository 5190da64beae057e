#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <utility>

#include "issue.hpp"
#include "process_group.hpp"
#include "tensors.hpp"

// The calls built from hiercoll's point-to-point messages: gather, scatter, the list form of all_to_all (and the
// uneven all_to_all_single's exchange), send and recv. Their tensors go through host memory.
namespace hiercoll_torch {

std::vector<hiercoll::Work> ProcessGroupHiercoll::exchange(const std::vector<at::Tensor>& to_peer,
                                                           const std::vector<at::Tensor>& from_peer) {
  std::vector<hiercoll::Work> works;
  for (int peer = 0; peer < size_; ++peer) {
    const at::Tensor& out = to_peer[peer];
    const at::Tensor& in = from_peer[peer];
    if (peer == rank_) {
      if (in.defined() && out.defined() && in.numel() > 0) in.copy_(out);
      continue;
    }
    if (in.defined() && in.numel() > 0) {
      works.push_back(comm().recv(in.data_ptr(), in.numel(), data_type(in, "exchange"), peer, kCollectiveTag));
    }
    if (out.defined() && out.numel() > 0) {
      works.push_back(comm().send(out.data_ptr(), out.numel(), data_type(out, "exchange"), peer, kCollectiveTag));
    }
  }
  return works;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::GatherOptions& opts) {
  return issue("gather", rank_, [&] {
    at::Tensor in = single(inputs, "gather");
    check_rank(opts.rootRank, size_, "root", "gather");
    std::vector<at::Tensor> outs;
    if (rank_ == opts.rootRank) {
      TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                  "hiercoll gather: the root needs one output list of ", size_, " tensors");
      outs = outputs[0];
      for (int peer = 0; peer < size_; ++peer) {
        check_tensor(outs[peer], "gather");
        check_same_kind(outs[peer], in, "gather");
        TORCH_CHECK(outs[peer].numel() == in.numel(), "hiercoll gather: output tensors must have the input's ",
                    in.numel(), " elements");
      }
    } else {
      TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                  "hiercoll gather: only the root passes output tensors");
    }
    return gather_to_root(in, outs, opts.rootRank, outs);
  });
}

#if HIERCOLL_TORCH_HAS_GATHER_SINGLE
c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::gather_single(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::GatherOptions& opts) {
  return issue("gather_single", rank_, [&] {
    check_tensor(input, "gather_single");
    check_rank(opts.rootRank, size_, "root", "gather_single");
    std::vector<at::Tensor> parts;
    if (rank_ == opts.rootRank) {
      check_tensor(output, "gather_single");
      check_same_kind(output, input, "gather_single");
      TORCH_CHECK(output.numel() == input.numel() * size_, "hiercoll gather_single: the output must hold ", size_,
                  " x ", input.numel(), " elements, it has ", output.numel());
      parts = output.view(-1).chunk(size_);  // contiguous: each part is rank i's slot in place
    }
    return gather_to_root(input, parts, opts.rootRank, {output});
  });
}
#endif

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::gather_to_root(const at::Tensor& input,
                                                                    std::vector<at::Tensor> parts, int root,
                                                                    std::vector<at::Tensor> result) {
  std::vector<at::Tensor> to_peer(size_), from_peer(size_);
  to_peer[root] = host(input);
  for (size_t peer = 0; peer < parts.size(); ++peer) from_peer[peer] = host(parts[peer]);
  auto works = exchange(to_peer, from_peer);
  CallTensors tensors;
  tensors.keep(to_peer[root]);
  for (size_t i = 0; i < parts.size(); ++i) tensors.result_in(parts[i], from_peer[i]);
  return submit(c10d::OpType::GATHER, std::move(works), std::move(result), std::move(tensors), {input});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::scatter(std::vector<at::Tensor>& outputs,
                                                             std::vector<std::vector<at::Tensor>>& inputs,
                                                             const c10d::ScatterOptions& opts) {
  return issue("scatter", rank_, [&] {
    at::Tensor out = single(outputs, "scatter");
    check_rank(opts.rootRank, size_, "root", "scatter");
    at::Tensor hout = host(out);
    std::vector<at::Tensor> to_peer(size_), from_peer(size_);
    if (rank_ == opts.rootRank) {
      TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                  "hiercoll scatter: the root needs one input list of ", size_, " tensors");
      for (int peer = 0; peer < size_; ++peer) {
        check_tensor(inputs[0][peer], "scatter");
        check_same_kind(inputs[0][peer], out, "scatter");
        TORCH_CHECK(inputs[0][peer].numel() == out.numel(), "hiercoll scatter: input tensors must have the output's ",
                    out.numel(), " elements");
        to_peer[peer] = host(inputs[0][peer]);
      }
    } else {
      TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                  "hiercoll scatter: only the root passes input tensors");
    }
    from_peer[opts.rootRank] = hout;
    auto works = exchange(to_peer, from_peer);
    return submit(c10d::OpType::SCATTER, std::move(works), outputs, staged(out, hout, to_peer));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::alltoall(std::vector<at::Tensor>& outputs,
                                                              std::vector<at::Tensor>& inputs,
                                                              const c10d::AllToAllOptions&) {
  return issue("alltoall", rank_, [&] {
    TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
                "hiercoll all_to_all: expects ", size_, " input and output tensors, got ", inputs.size(), " and ",
                outputs.size());
    std::vector<at::Tensor> to_peer, from_peer;
    for (int peer = 0; peer < size_; ++peer) {
      check_tensor(inputs[peer], "all_to_all");
      check_tensor(outputs[peer], "all_to_all");
      check_same_kind(inputs[peer], outputs[0], "all_to_all");
      check_same_kind(outputs[peer], outputs[0], "all_to_all");
      to_peer.push_back(host(inputs[peer]));
      from_peer.push_back(host(outputs[peer]));
    }
    TORCH_CHECK(outputs[rank_].numel() == inputs[rank_].numel(),
                "hiercoll all_to_all: this rank's own input and output differ in size");
    auto works = exchange(to_peer, from_peer);
    CallTensors tensors;
    tensors.in_use = to_peer;
    for (int peer = 0; peer < size_; ++peer) tensors.result_in(outputs[peer], from_peer[peer]);
    return submit(c10d::OpType::ALLTOALL, std::move(works), outputs, std::move(tensors), inputs);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  return issue("send", rank_, [&] {
    at::Tensor t = single(tensors, "send");
    check_rank(dst_rank, size_, "destination rank", "send");
    TORCH_CHECK(tag >= 0, "hiercoll send: tags must be >= 0, got ", tag);
    at::Tensor h = host(t);
    auto work = comm().send(h.data_ptr(), h.numel(), data_type(t, "send"), dst_rank, static_cast<uint32_t>(tag));
    return submit(c10d::OpType::SEND, {work}, tensors, keeping({h}));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  return issue("recv", rank_, [&] {
    check_rank(src_rank, size_, "source rank", "recv");
    return receive(tensors, src_rank, tag, c10d::OpType::RECV);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return issue("recv", rank_,
               [&] { return receive(tensors, hiercoll::Communicator::kAnySource, tag, c10d::OpType::RECVANYSOURCE); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::receive(std::vector<at::Tensor>& tensors, int peer, int tag,
                                                             c10d::OpType type) {
  at::Tensor t = single(tensors, "recv");
  TORCH_CHECK(tag >= 0, "hiercoll recv: tags must be >= 0, got ", tag);
  at::Tensor h = host(t);
  auto work = comm().recv(h.data_ptr(), h.numel(), data_type(t, "recv"), peer, static_cast<uint32_t>(tag));
  auto handle = submit(type, {work}, tensors, staged(t, h));
  static_cast<WorkHiercoll&>(*handle).set_receive(work);  // sourceRank() names the sender
  return handle;
}

}  // namespace hiercoll_torch
