#pragma once
#include <torch/torch.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "corpus.hpp"

namespace albert {

/// One MLM batch: labels hold the original token where a token was chosen for prediction, -100 elsewhere.
struct Batch {
  torch::Tensor input_ids, attention_mask, labels;
};

struct LoaderOptions {
  int64_t batch_size = 16;   ///< sequences per rank and micro-step
  double mask_probability = 0.15;
  uint64_t seed = 1;
  int rank = 0, world_size = 1;
  int num_workers = 2;       ///< threads preparing batches ahead of training (0: prepared on demand)
  int prefetch_per_worker = 2;
};

/// Masked-LM batches from this rank's shard of the corpus (sequence i belongs to rank i mod world size),
/// in a random order per epoch. Batch k is a pure function of (seed, rank, k): the same data arrives
/// whatever the number of workers, and a resumed run continues exactly where it stopped.
/// Masking follows BERT: 15% of the ordinary tokens are chosen; of those 80% become [MASK], 10% a random
/// token, 10% stay.
class MlmLoader {
 public:
  MlmLoader(const TokenisedCorpus& corpus, LoaderOptions options, int64_t first_batch = 0);
  ~MlmLoader();
  MlmLoader(const MlmLoader&) = delete;
  MlmLoader& operator=(const MlmLoader&) = delete;

  /// The next batch in order (waits for a worker when they fall behind).
  Batch next();

  /// Batch `index`, computed here (what the workers run).
  Batch make(int64_t index) const;

 private:
  void work(int64_t first);  // makes batches first, first + num_workers, ...

  const TokenisedCorpus& corpus_;
  LoaderOptions options_;
  std::vector<int64_t> shard_;  // sequence indices of this rank
  int64_t next_ = 0;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int64_t, Batch> ready_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace albert
