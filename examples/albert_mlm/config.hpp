#pragma once
#include <cstdint>
#include <string>

namespace albert {

/// ALBERT hyper-parameters (Lan et al. 2019): a factorised embedding of size E projected to the hidden
/// size H, and one transformer layer whose parameters every one of the L layers shares.
struct AlbertConfig {
  std::string name;
  int64_t vocab_size = 30000;  ///< replaced by the tokenizer's vocabulary when training
  int64_t embedding_size = 128;
  int64_t hidden_size = 768;
  int64_t num_layers = 12;
  int64_t num_heads = 12;
  int64_t intermediate_size = 3072;
  int64_t max_positions = 512;
  int64_t type_vocab_size = 2;
  double dropout = 0.0;  ///< ALBERT v2 trains without dropout

  /// "tiny" (for CI), "base" (~11-12M parameters at a 30k vocabulary) or "large". Throws on other names.
  static AlbertConfig preset(const std::string& name);
};

}  // namespace albert
