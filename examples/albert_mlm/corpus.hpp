#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace albert {

/// Special token ids, fixed when the tokenizer is trained (see prepare_tokens).
struct SpecialTokens {
  int32_t pad = 0, unk = 1, cls = 2, sep = 3, mask = 4;
  int32_t first_ordinary = 5;  ///< random replacements are drawn from [first_ordinary, vocab)
};

/// Trains a SentencePiece unigram model on `corpus` (one document per line) into `model_path` if it does
/// not exist, with the special tokens above, and writes the corpus as token ids (one document per line)
/// to `ids_path` and the vocabulary to `ids_path`.vocab. Runs Debian's spm_train / spm_encode in child processes: libsentencepiece carries its own
/// copy of protobuf, which clashes with LibTorch's in one process.
void prepare_tokens(const std::string& corpus, const std::string& model_path, int vocab_size,
                    const std::string& ids_path);

/// The corpus as fixed-length training sequences: documents joined by [SEP], the stream cut into pieces of
/// seq_len - 2 tokens, each framed as [CLS] piece [SEP] (BERT's "full sentences" packing).
/// Stored flat: sequence i is tokens[i*seq_len, (i+1)*seq_len).
struct TokenisedCorpus {
  std::vector<int32_t> tokens;
  int64_t seq_len = 0;
  int64_t vocab_size = 0;
  int64_t sequences() const { return seq_len ? static_cast<int64_t>(tokens.size()) / seq_len : 0; }
};

/// Reads what prepare_tokens wrote. Checks the tokenizer's special tokens.
TokenisedCorpus load_tokens(const std::string& ids_path, int64_t seq_len);

}  // namespace albert
