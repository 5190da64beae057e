#include "loader.hpp"

#include <random>

namespace albert {

namespace {
uint64_t mix(uint64_t a, uint64_t b) {  // splitmix-style: independent streams per (seed, rank, batch)
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

MlmLoader::MlmLoader(const TokenisedCorpus& corpus, LoaderOptions options, int64_t first_batch)
    : corpus_(corpus), options_(options), next_(first_batch) {
  for (int64_t i = options_.rank; i < corpus_.sequences(); i += options_.world_size) shard_.push_back(i);
  TORCH_CHECK(!shard_.empty(), "the corpus has ", corpus_.sequences(), " sequences, too few for ",
              options_.world_size, " ranks");
  // Each worker's first batch is fixed here: a thread that starts late must not read next_ after the
  // training loop has already moved it, or it would skip its batch and leave the loop waiting for it.
  for (int w = 0; w < options_.num_workers; ++w) workers_.emplace_back([this, first = next_ + w] { work(first); });
}

MlmLoader::~MlmLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& t : workers_) t.join();
}

Batch MlmLoader::make(int64_t index) const {
  const int64_t seq = corpus_.seq_len, batch = options_.batch_size;
  const int64_t shard = static_cast<int64_t>(shard_.size());
  const int64_t per_epoch = std::max<int64_t>(1, shard / batch);
  const int64_t epoch = index / per_epoch, slot = index % per_epoch;

  // This epoch's order of the shard, the same for every batch of the epoch.
  std::vector<int64_t> order(shard_);
  std::mt19937_64 shuffle_rng(mix(options_.seed, mix(options_.rank, epoch)));
  std::shuffle(order.begin(), order.end(), shuffle_rng);

  std::mt19937_64 rng(mix(options_.seed ^ 0xA1BE27ull, mix(options_.rank, index)));
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  const SpecialTokens special;
  std::uniform_int_distribution<int32_t> random_token(special.first_ordinary,
                                                      static_cast<int32_t>(corpus_.vocab_size) - 1);

  auto ids = torch::empty({batch, seq}, torch::kLong);
  auto labels = torch::full({batch, seq}, -100, torch::kLong);
  auto* id = ids.data_ptr<int64_t>();
  auto* label = labels.data_ptr<int64_t>();
  int64_t chosen = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t* source = corpus_.tokens.data() + order[(slot * batch + b) % shard] * seq;
    for (int64_t t = 0; t < seq; ++t) {
      const int32_t token = source[t];
      int64_t& out = id[b * seq + t];
      out = token;
      if (token < special.first_ordinary || coin(rng) >= options_.mask_probability) continue;
      label[b * seq + t] = token;
      ++chosen;
      const double what = coin(rng);
      if (what < 0.8) {
        out = special.mask;
      } else if (what < 0.9) {
        out = random_token(rng);
      }
    }
  }
  if (chosen == 0) {  // keep the loss defined: predict one token
    label[1] = id[1];
    id[1] = special.mask;
  }
  return {ids, torch::ones({batch, seq}, torch::kBool), labels};
}

void MlmLoader::work(int64_t first) {
  for (int64_t index = first;; index += options_.num_workers) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] {
        return stopping_ || index < next_ + static_cast<int64_t>(options_.num_workers) * options_.prefetch_per_worker;
      });
      if (stopping_) return;
    }
    Batch batch = make(index);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.emplace(index, std::move(batch));
    }
    changed_.notify_all();
  }
}

Batch MlmLoader::next() {
  if (workers_.empty()) return make(next_++);
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return ready_.count(next_) > 0; });
  Batch batch = std::move(ready_[next_]);
  ready_.erase(next_);
  ++next_;
  lock.unlock();
  changed_.notify_all();
  return batch;
}

}  // namespace albert
