#pragma once
#include <torch/torch.h>

#include <memory>
#include <string>

namespace albert {

/// What the training loop needs of an optimizer: a step with a given learning rate, and checkpointing.
/// Biases and LayerNorm weights (1-D parameters) get no weight decay, as in BERT and ALBERT.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step(double lr) = 0;
  virtual void save(torch::serialize::OutputArchive& archive) = 0;
  virtual void load(torch::serialize::InputArchive& archive) = 0;
};

/// "adamw" (torch::optim::AdamW) or "lamb" (You et al. 2019: Adam's update rescaled per parameter by the
/// trust ratio ||w|| / ||update||, the optimizer ALBERT was trained with).
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const std::vector<torch::Tensor>& params,
                                          double weight_decay);

/// Linear warm-up to `peak` over `warmup` steps, then linear decay to 0 at `total`.
double learning_rate(int64_t step, int64_t warmup, int64_t total, double peak);

}  // namespace albert
