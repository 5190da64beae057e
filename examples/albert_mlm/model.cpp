#include "model.hpp"

#include <cmath>

namespace albert {

namespace {
// BERT's initialisation: N(0, 0.02) weights, zero biases, unit LayerNorm.
void initialise(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    bool is_norm = name.find("norm") != std::string::npos;
    if (name.find("bias") != std::string::npos) {
      p.zero_();
    } else if (is_norm) {
      p.fill_(1.0);
    } else {
      p.normal_(0.0, 0.02);
    }
  }
}
}  // namespace

SharedLayerImpl::SharedLayerImpl(const AlbertConfig& c) : heads(c.num_heads) {
  TORCH_CHECK(c.hidden_size % c.num_heads == 0, "hidden size ", c.hidden_size, " is not a multiple of ",
              c.num_heads, " heads");
  const int64_t h = c.hidden_size;
  query = register_module("query", torch::nn::Linear(h, h));
  key = register_module("key", torch::nn::Linear(h, h));
  value = register_module("value", torch::nn::Linear(h, h));
  attention_out = register_module("attention_out", torch::nn::Linear(h, h));
  attention_norm = register_module("attention_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({h}).eps(1e-12)));
  ffn_in = register_module("ffn_in", torch::nn::Linear(h, c.intermediate_size));
  ffn_out = register_module("ffn_out", torch::nn::Linear(c.intermediate_size, h));
  ffn_norm = register_module("ffn_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({h}).eps(1e-12)));
  dropout = register_module("dropout", torch::nn::Dropout(c.dropout));
}

torch::Tensor SharedLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& attention_bias) {
  const int64_t batch = x.size(0), seq = x.size(1), hidden = x.size(2), head_dim = hidden / heads;
  auto split_heads = [&](const torch::Tensor& t) { return t.view({batch, seq, heads, head_dim}).transpose(1, 2); };
  torch::Tensor q = split_heads(query(x)), k = split_heads(key(x)), v = split_heads(value(x));
  torch::Tensor scores = torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(head_dim));
  torch::Tensor probs = dropout(torch::softmax(scores + attention_bias, -1));
  torch::Tensor context = torch::matmul(probs, v).transpose(1, 2).reshape({batch, seq, hidden});
  torch::Tensor y = attention_norm(x + dropout(attention_out(context)));
  return ffn_norm(y + dropout(ffn_out(torch::gelu(ffn_in(y)))));
}

AlbertMlmImpl::AlbertMlmImpl(const AlbertConfig& c) : config(c) {
  word = register_module("word", torch::nn::Embedding(c.vocab_size, c.embedding_size));
  position = register_module("position", torch::nn::Embedding(c.max_positions, c.embedding_size));
  token_type = register_module("token_type", torch::nn::Embedding(c.type_vocab_size, c.embedding_size));
  embedding_norm = register_module(
      "embedding_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.embedding_size}).eps(1e-12)));
  embedding_to_hidden = register_module("embedding_to_hidden", torch::nn::Linear(c.embedding_size, c.hidden_size));
  layer = register_module("layer", SharedLayer(c));
  head_dense = register_module("head_dense", torch::nn::Linear(c.hidden_size, c.embedding_size));
  head_norm =
      register_module("head_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.embedding_size}).eps(1e-12)));
  decoder_bias = register_parameter("decoder_bias", torch::zeros({c.vocab_size}));
  dropout = register_module("dropout", torch::nn::Dropout(c.dropout));
  initialise(*this);
}

torch::Tensor AlbertMlmImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                     const torch::Tensor& labels) {
  const int64_t seq = input_ids.size(1);
  TORCH_CHECK(seq <= config.max_positions, "sequence length ", seq, " exceeds the model's ", config.max_positions,
              " positions");
  auto positions = torch::arange(seq, input_ids.options()).unsqueeze(0);
  torch::Tensor e = word(input_ids) + position(positions) + token_type(torch::zeros_like(input_ids));
  torch::Tensor x = embedding_to_hidden(dropout(embedding_norm(e)));

  // Padding gets a large negative attention score, in the activations' type (autocast may run in 16 bits).
  torch::Tensor bias = (1.0 - attention_mask.to(x.scalar_type())).mul(-1e4).view({x.size(0), 1, 1, seq});
  for (int64_t l = 0; l < config.num_layers; ++l) x = layer(x, bias);

  torch::Tensor selected = x.reshape({-1, x.size(2)}).index({labels.reshape({-1}) != -100});
  torch::Tensor h = head_norm(torch::gelu(head_dense(selected)));
  return torch::matmul(h, word->weight.t()) + decoder_bias;
}

int64_t parameter_count(torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

}  // namespace albert
