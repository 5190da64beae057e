#include "optim.hpp"

#include <cmath>
#include <stdexcept>

namespace albert {

namespace {

class AdamW : public Optimizer {
 public:
  AdamW(const std::vector<torch::Tensor>& params, double weight_decay) : optimizer_(groups(params, weight_decay)) {}

  void step(double lr) override {
    for (auto& group : optimizer_.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    optimizer_.step();
  }
  void save(torch::serialize::OutputArchive& archive) override { optimizer_.save(archive); }
  void load(torch::serialize::InputArchive& archive) override { optimizer_.load(archive); }

 private:
  static std::vector<torch::optim::OptimizerParamGroup> groups(const std::vector<torch::Tensor>& params,
                                                               double weight_decay) {
    std::vector<torch::Tensor> decay, no_decay;
    for (const auto& p : params) (p.dim() > 1 ? decay : no_decay).push_back(p);
    std::vector<torch::optim::OptimizerParamGroup> out;
    out.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                torch::optim::AdamWOptions(0.0).betas({0.9, 0.999}).eps(1e-6).weight_decay(weight_decay)));
    out.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                   torch::optim::AdamWOptions(0.0).betas({0.9, 0.999}).eps(1e-6).weight_decay(0.0)));
    return out;
  }
  torch::optim::AdamW optimizer_;
};

class Lamb : public Optimizer {
 public:
  Lamb(const std::vector<torch::Tensor>& params, double weight_decay) : params_(params), weight_decay_(weight_decay) {
    for (const auto& p : params_) {
      m_.push_back(torch::zeros_like(p));
      v_.push_back(torch::zeros_like(p));
    }
  }

  void step(double lr) override {
    torch::NoGradGuard no_grad;
    ++steps_;
    const double c1 = 1.0 - std::pow(kBeta1, static_cast<double>(steps_));
    const double c2 = 1.0 - std::pow(kBeta2, static_cast<double>(steps_));
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor& p = params_[i];
      const torch::Tensor& g = p.grad();
      if (!g.defined()) continue;
      m_[i].mul_(kBeta1).add_(g, 1.0 - kBeta1);
      v_[i].mul_(kBeta2).addcmul_(g, g, 1.0 - kBeta2);
      torch::Tensor update = (m_[i] / c1) / ((v_[i] / c2).sqrt() + kEps);
      if (p.dim() > 1 && weight_decay_ > 0) update.add_(p, weight_decay_);
      const double w_norm = p.norm().item<double>();
      const double u_norm = update.norm().item<double>();
      const double trust = (w_norm > 0 && u_norm > 0) ? w_norm / u_norm : 1.0;
      p.add_(update, -lr * trust);
    }
  }

  void save(torch::serialize::OutputArchive& archive) override {
    archive.write("lamb_steps", torch::tensor(steps_));
    for (size_t i = 0; i < params_.size(); ++i) {
      archive.write("lamb_m_" + std::to_string(i), m_[i]);
      archive.write("lamb_v_" + std::to_string(i), v_[i]);
    }
  }
  void load(torch::serialize::InputArchive& archive) override {
    torch::Tensor steps;
    archive.read("lamb_steps", steps);
    steps_ = steps.item<int64_t>();
    for (size_t i = 0; i < params_.size(); ++i) {
      archive.read("lamb_m_" + std::to_string(i), m_[i]);
      archive.read("lamb_v_" + std::to_string(i), v_[i]);
    }
  }

 private:
  static constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-6;
  std::vector<torch::Tensor> params_, m_, v_;
  double weight_decay_;
  int64_t steps_ = 0;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const std::vector<torch::Tensor>& params,
                                          double weight_decay) {
  if (name == "adamw") return std::make_unique<AdamW>(params, weight_decay);
  if (name == "lamb") return std::make_unique<Lamb>(params, weight_decay);
  throw std::invalid_argument("unknown optimizer '" + name + "' (lamb or adamw)");
}

double learning_rate(int64_t step, int64_t warmup, int64_t total, double peak) {
  if (step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (total <= warmup) return peak;
  return peak * std::max(0.0, static_cast<double>(total - step) / static_cast<double>(total - warmup));
}

}  // namespace albert
