#pragma once
#include <torch/torch.h>

#include "config.hpp"

namespace albert {

/// The one transformer layer ALBERT applies num_layers times: self-attention and a GELU feed-forward
/// block, each followed by a residual connection and LayerNorm (post-LN, as in BERT and ALBERT).
struct SharedLayerImpl : torch::nn::Module {
  explicit SharedLayerImpl(const AlbertConfig& c);
  /// x: [batch, seq, hidden]; attention_bias: [batch, 1, 1, seq], 0 for tokens and a large negative for padding.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& attention_bias);

  int64_t heads;
  torch::nn::Linear query{nullptr}, key{nullptr}, value{nullptr}, attention_out{nullptr};
  torch::nn::LayerNorm attention_norm{nullptr};
  torch::nn::Linear ffn_in{nullptr}, ffn_out{nullptr};
  torch::nn::LayerNorm ffn_norm{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(SharedLayer);

/// ALBERT with its masked-language-model head. The decoder reuses the word-embedding matrix.
struct AlbertMlmImpl : torch::nn::Module {
  explicit AlbertMlmImpl(const AlbertConfig& c);

  /// Logits over the vocabulary at the positions where labels != -100 only (the only ones the MLM loss
  /// needs): [masked tokens, vocab]. input_ids, labels: [batch, seq] int64; attention_mask: [batch, seq] bool.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                        const torch::Tensor& labels);

  AlbertConfig config;
  torch::nn::Embedding word{nullptr}, position{nullptr}, token_type{nullptr};
  torch::nn::LayerNorm embedding_norm{nullptr};
  torch::nn::Linear embedding_to_hidden{nullptr};
  SharedLayer layer{nullptr};
  torch::nn::Linear head_dense{nullptr};
  torch::nn::LayerNorm head_norm{nullptr};
  torch::Tensor decoder_bias;
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(AlbertMlm);

/// Number of trainable parameters (shared ones counted once).
int64_t parameter_count(torch::nn::Module& module);

}  // namespace albert
