#pragma once
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "hiercoll/store.hpp"

namespace albert {

/// How gradients are averaged across ranks. The training loop calls ready(i) from the autograd hook the
/// moment gradient i is final, so communication overlaps the rest of backward, then finish().
class GradSync {
 public:
  virtual ~GradSync() = default;
  virtual std::string name() const = 0;
  /// Makes every rank's tensors equal rank 0's (the initial model, as DDP does).
  virtual void broadcast(const std::vector<torch::Tensor>& tensors) = 0;
  virtual void ready(size_t index) = 0;
  /// Waits until every gradient holds the average over ranks.
  virtual void finish() = 0;
  /// Element-wise sum over ranks (for logging).
  virtual std::vector<double> sum(const std::vector<double>& values) = 0;
};

/// backend: "hiercoll" (hiercoll::GradientBucketer over this library), "gloo" or "nccl" (LibTorch's c10d
/// process groups, bucketed the same way DDP buckets) or "mpi" (MPI_Iallreduce per bucket; run under
/// mpirun). `grads` are the parameters' gradient tensors, allocated and kept in place by the caller.
std::unique_ptr<GradSync> make_grad_sync(const std::string& backend, const hiercoll::Rendezvous& rendezvous,
                                         std::vector<torch::Tensor> grads);

/// Backends this build of the trainer has.
std::vector<std::string> available_backends();

}  // namespace albert
