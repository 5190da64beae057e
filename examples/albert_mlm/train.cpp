// ALBERT masked-language-model pretraining over hiercoll (or gloo / nccl / mpi for comparison).
// One process per rank, launched by hiercoll_launch, torchrun or mpirun. See README.md here.
#include <ATen/autocast_mode.h>
#include <dlfcn.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "config.hpp"
#include "corpus.hpp"
#include "grad_sync.hpp"
#include "hiercoll/communicator.hpp"
#include "loader.hpp"
#include "model.hpp"
#include "optim.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

const char* kUsage = R"(albert_mlm: ALBERT masked-LM pretraining with gradients averaged across ranks

  --config tiny|base|large   model size (default tiny)
  --corpus FILE              text, one document per line (required)
  --tokenizer FILE.model     SentencePiece model; trained on the corpus if missing (default OUT/spm-VOCAB.model)
  --vocab-size N             tokenizer vocabulary when training one (default 4000)
  --seq-len N                tokens per sequence (default 128)
  --batch N                  sequences per rank and micro-step (default 16)
  --accum N                  micro-steps per optimizer step (gradient accumulation, default 1)
  --steps N                  optimizer steps (default 300)
  --lr X                     peak learning rate (default 2e-3)
  --warmup N                 warm-up steps, then linear decay (default steps/10)
  --optimizer lamb|adamw     (default lamb)
  --weight-decay X           (default 0.01)
  --backend NAME             hiercoll|gloo|nccl|mpi (default hiercoll)
  --num-workers N            data-loading threads (default 2; 0 loads in the training thread)
  --threads N                torch intra-op threads per rank (default 1)
  --device cpu|cuda          (default cpu)
  --amp none|bf16|fp16       autocast on CUDA (fp16 with a static loss scale)
  --seed N                   (default 1)
  --out DIR                  logs, tokenizer, checkpoints (default albert-out)
  --log-every N              steps between log lines (default 10)
  --checkpoint-every N       steps between checkpoints (default 0: only at the end)
  --resume                   continue from OUT/checkpoint.pt if present
  --stop-after N             leave (with a checkpoint) after step N, as a preempted job would
  --print-params             print the parameter count of --config (30k vocabulary) and exit
)";

struct Args {
  std::map<std::string, std::string> values;
  std::string get(const std::string& key, const std::string& fallback) const {
    auto it = values.find(key);
    return it == values.end() ? fallback : it->second;
  }
  int64_t integer(const std::string& key, int64_t fallback) const {
    auto it = values.find(key);
    if (it == values.end()) return fallback;
    try {
      return std::stoll(it->second);
    } catch (...) {
      throw std::invalid_argument("--" + key + " expects an integer, got '" + it->second + "'");
    }
  }
  double real(const std::string& key, double fallback) const {
    auto it = values.find(key);
    if (it == values.end()) return fallback;
    try {
      return std::stod(it->second);
    } catch (...) {
      throw std::invalid_argument("--" + key + " expects a number, got '" + it->second + "'");
    }
  }
  bool flag(const std::string& key) const { return values.count(key) > 0; }
};

Args parse(int argc, char** argv) {
  static const std::set<std::string> flags{"resume", "print-params", "help"};
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) throw std::invalid_argument("unexpected argument '" + a + "'");
    std::string key = a.substr(2);
    if (flags.count(key)) {
      args.values[key] = "1";
    } else if (i + 1 < argc) {
      args.values[key] = argv[++i];
    } else {
      throw std::invalid_argument(a + " needs a value");
    }
  }
  return args;
}

/// Calls back when the autograd engine has accumulated a parameter's gradient (DDP's hook point).
struct GradientReady : torch::autograd::FunctionPostHook {
  explicit GradientReady(std::function<void()> callback) : callback(std::move(callback)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    callback();
    return outputs;
  }
  std::function<void()> callback;
};

/// Autocast for one forward pass; leaves the thread's autocast state as it found it.
struct Autocast {
  Autocast(const std::string& amp, bool cuda) : on(amp != "none"), device(cuda ? at::kCUDA : at::kCPU) {
    if (!on) return;
    at::autocast::set_autocast_dtype(device, amp == "bf16" ? at::kBFloat16 : at::kHalf);
    at::autocast::set_autocast_enabled(device, true);  // CPU autocast is refused earlier; kept symmetric
  }
  ~Autocast() {
    if (!on) return;
    at::autocast::set_autocast_enabled(device, false);
    at::autocast::clear_cache();
  }
  bool on;
  at::DeviceType device;
};

std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  std::ostringstream s;
  s.precision(7);
  s << x;
  return s.str();
}

int run(int argc, char** argv) {
  Args args = parse(argc, argv);
  if (args.flag("help")) {
    std::cout << kUsage;
    return 0;
  }
  albert::AlbertConfig config = albert::AlbertConfig::preset(args.get("config", "tiny"));
  if (args.flag("print-params")) {
    torch::manual_seed(0);
    albert::AlbertMlm model(config);
    std::cout << "ALBERT-" << config.name << ": " << albert::parameter_count(*model) << " parameters (vocabulary "
              << config.vocab_size << ", E=" << config.embedding_size << ", H=" << config.hidden_size << ", "
              << config.num_layers << " shared layers)\n";
    return 0;
  }

  const std::string corpus_path = args.get("corpus", "");
  if (corpus_path.empty()) throw std::invalid_argument("--corpus is required (see --help)");
  if (!fs::exists(corpus_path)) throw std::invalid_argument("corpus " + corpus_path + " does not exist");
  const fs::path out_dir = args.get("out", "albert-out");
  const int64_t vocab = args.integer("vocab-size", 4000);
  const int64_t seq_len = args.integer("seq-len", 128);
  const int64_t steps = args.integer("steps", 300);
  const int64_t accum = args.integer("accum", 1);
  const int64_t warmup = args.integer("warmup", std::max<int64_t>(1, steps / 10));
  const int64_t log_every = std::max<int64_t>(1, args.integer("log-every", 10));
  const int64_t checkpoint_every = args.integer("checkpoint-every", 0);
  const int64_t stop_after = args.integer("stop-after", 0);
  const double peak_lr = args.real("lr", 2e-3);
  const std::string backend = args.get("backend", "hiercoll");
  const std::string amp = args.get("amp", "none");
  const bool cuda = args.get("device", "cpu") == "cuda";
  if (steps < 1 || accum < 1) throw std::invalid_argument("--steps and --accum must be at least 1");
  if (amp != "none" && amp != "bf16" && amp != "fp16") throw std::invalid_argument("--amp is none, bf16 or fp16");
  // Autocast is for GPUs: LibTorch 1.13's CPU autocast leaves mixed bf16/fp32 kernels that fail in backward.
  if (amp != "none" && !cuda) throw std::invalid_argument("--amp " + amp + " needs --device cuda");
  if (cuda && !torch::cuda::is_available()) throw std::invalid_argument("--device cuda, but no CUDA device");
  const int threads = static_cast<int>(args.integer("threads", 1));
  torch::set_num_threads(threads);
  // Debian's LibTorch calls whichever BLAS is installed; OpenBLAS runs its own thread pool, which on top of
  // several ranks per machine oversubscribes the cores (6x slower on 2 cores). Give it the same budget.
  using SetThreads = void (*)(int);
  if (auto set_blas_threads = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set_blas_threads(threads);
  }

  // Rank 0 may spend minutes training the tokenizer; HIERCOLL_TIMEOUT_MS, when set, bounds every wait.
  const auto rendezvous_timeout =
      std::getenv("HIERCOLL_TIMEOUT_MS") ? hiercoll::CommOptions::from_env().timeout : std::chrono::minutes(10);
  hiercoll::Rendezvous rendezvous =
      hiercoll::rendezvous_from_env(std::chrono::duration_cast<std::chrono::milliseconds>(rendezvous_timeout));
  const int rank = rendezvous.rank, size = rendezvous.size;
  fs::create_directories(out_dir);

  // Tokenizer and token ids: rank 0 makes them (training the tokenizer if needed); the others wait for its word.
  const std::string tokenizer = args.get("tokenizer", (out_dir / ("spm-" + std::to_string(vocab) + ".model")).string());
  const std::string ids_path = (out_dir / ("corpus-" + std::to_string(vocab) + ".ids")).string();
  if (rank == 0) {
    if (!fs::exists(tokenizer)) std::cerr << "training a " << vocab << "-piece tokenizer on " << corpus_path << "\n";
    albert::prepare_tokens(corpus_path, tokenizer, static_cast<int>(vocab), ids_path);
    rendezvous.store->set("albert/tokens", ids_path);
  } else {
    rendezvous.store->get("albert/tokens");
  }
  albert::TokenisedCorpus corpus = albert::load_tokens(ids_path, seq_len);
  config.vocab_size = corpus.vocab_size;
  config.max_positions = std::max(config.max_positions, seq_len);

  torch::manual_seed(static_cast<uint64_t>(args.integer("seed", 1)));
  albert::AlbertMlm model(config);
  torch::Device device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  model->to(device);
  std::vector<torch::Tensor> params = model->parameters();
  std::vector<torch::Tensor> grads;
  for (auto& p : params) {
    p.mutable_grad() = torch::zeros_like(p);  // kept for the whole run: autograd accumulates into it in place
    grads.push_back(p.grad());
  }

  // Resume before the broadcast, so a resumed run continues from rank 0's checkpoint everywhere.
  auto optimizer = albert::make_optimizer(args.get("optimizer", "lamb"), params, args.real("weight-decay", 0.01));
  const fs::path checkpoint = out_dir / "checkpoint.pt";
  int64_t start_step = 0;
  if (args.flag("resume") && fs::exists(checkpoint)) {
    torch::serialize::InputArchive archive;
    archive.load_from(checkpoint.string(), device);
    model->load(archive);
    optimizer->load(archive);
    torch::Tensor step;
    archive.read("step", step);
    start_step = step.item<int64_t>();
    if (rank == 0) std::cerr << "resumed from " << checkpoint << " at step " << start_step << "\n";
  }

  auto sync = albert::make_grad_sync(backend, rendezvous, grads);
  {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> data;
    for (auto& p : params) data.push_back(p.detach());
    sync->broadcast(data);
  }

  // Each parameter reports when its gradient is final; on the last micro-step of a step that starts its
  // bucket's allreduce while backward goes on.
  bool syncing = false;
  // A shared_ptr before torch 2.15, an intrusive_ptr since: whatever grad_accumulator returns.
  std::vector<decltype(torch::autograd::impl::grad_accumulator(params[0]))> accumulators;
  for (size_t i = 0; i < params.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params[i]);
    accumulator->add_post_hook(std::make_unique<GradientReady>([&, i] {
      if (syncing) sync->ready(i);
    }));
    accumulators.push_back(std::move(accumulator));
  }

  albert::LoaderOptions loader_options;
  loader_options.batch_size = args.integer("batch", 16);
  loader_options.seed = static_cast<uint64_t>(args.integer("seed", 1));
  loader_options.rank = rank;
  loader_options.world_size = size;
  loader_options.num_workers = static_cast<int>(args.integer("num-workers", 2));
  albert::MlmLoader loader(corpus, loader_options, start_step * accum);

  std::ofstream log;
  if (rank == 0) {
    log.open(out_dir / "log.jsonl", start_step > 0 ? std::ios::app : std::ios::trunc);
    std::cerr << "ALBERT-" << config.name << " " << albert::parameter_count(*model) << " parameters, vocabulary "
              << config.vocab_size << ", " << corpus.sequences() << " sequences of " << seq_len << ", " << size
              << " ranks, backend " << sync->name() << "\n";
  }
  const double loss_scale = amp == "fp16" ? 1024.0 : 1.0;  // fp16 gradients underflow without one

  double interval_loss = 0, interval_correct = 0, interval_count = 0, comm_wait = 0, measured_time = 0;
  int64_t measured_steps = 0;
  const int64_t measure_from = start_step + std::max<int64_t>(1, (steps - start_step) / 10);  // skip warm-up
  auto interval_start = Clock::now();
  double last_loss = NAN;
  for (int64_t step = start_step; step < steps; ++step) {
    auto step_start = Clock::now();
    for (int64_t micro = 0; micro < accum; ++micro) {
      albert::Batch batch = loader.next();
      torch::Tensor ids = batch.input_ids.to(device), mask = batch.attention_mask.to(device);
      torch::Tensor labels = batch.labels.to(device);
      torch::Tensor targets = labels.reshape({-1}).index({labels.reshape({-1}) != -100});
      torch::Tensor loss;
      {
        Autocast autocast(amp, cuda);
        torch::Tensor logits = model->forward(ids, mask, labels);
        loss = torch::nn::functional::cross_entropy(logits.to(torch::kFloat), targets);
        interval_correct += (logits.argmax(-1) == targets).sum().item<double>();
      }
      interval_loss += loss.item<double>() * targets.numel();
      interval_count += targets.numel();
      syncing = micro == accum - 1;
      (loss * (loss_scale / static_cast<double>(accum))).backward();
    }
    auto sync_start = Clock::now();
    sync->finish();
    comm_wait += std::chrono::duration<double>(Clock::now() - sync_start).count();
    bool finite = true;
    if (loss_scale != 1.0) {
      torch::NoGradGuard no_grad;
      for (auto& g : grads) g.div_(loss_scale);
      for (auto& g : grads) finite = finite && torch::isfinite(g).all().item<bool>();
    }
    if (finite) optimizer->step(albert::learning_rate(step, warmup, steps, peak_lr));
    for (auto& g : grads) g.zero_();
    if (step >= measure_from) {
      measured_time += std::chrono::duration<double>(Clock::now() - step_start).count();
      ++measured_steps;
    }

    if ((step + 1) % log_every == 0 || step + 1 == steps) {
      auto totals = sync->sum({interval_loss, interval_correct, interval_count});
      double seconds = std::chrono::duration<double>(Clock::now() - interval_start).count();
      int64_t steps_in_interval = (step % log_every) + 1;
      last_loss = totals[0] / totals[2];
      if (rank == 0) {
        std::ostringstream line;
        line << "{\"step\": " << step + 1 << ", \"loss\": " << json_number(last_loss)
             << ", \"mlm_accuracy\": " << json_number(totals[1] / totals[2])
             << ", \"lr\": " << json_number(albert::learning_rate(step, warmup, steps, peak_lr))
             << ", \"samples_per_s\": "
             << json_number(steps_in_interval * accum * loader_options.batch_size * size / seconds)
             << ", \"backend\": \"" << sync->name() << "\", \"ranks\": " << size << "}";
        log << line.str() << "\n" << std::flush;
        std::cout << line.str() << "\n" << std::flush;
      }
      interval_loss = interval_correct = interval_count = 0;
      interval_start = Clock::now();
    }
    const bool stopping = step + 1 == steps || step + 1 == stop_after;
    if (rank == 0 && ((checkpoint_every > 0 && (step + 1) % checkpoint_every == 0) || stopping)) {
      torch::serialize::OutputArchive archive;
      model->save(archive);
      optimizer->save(archive);
      archive.write("step", torch::tensor(step + 1));
      archive.save_to((out_dir / "checkpoint.pt.tmp").string());
      fs::rename(out_dir / "checkpoint.pt.tmp", checkpoint);  // a crash never leaves half a checkpoint
    }
    if (step + 1 == stop_after) {
      sync->sum({0.0});  // no rank leaves before rank 0's checkpoint is on disk
      return 0;
    }
  }

  // Every rank's comm wait, averaged: one rank's alone says mostly how often that rank reached the allreduce first
  // (and so waited for the others' compute), which on shared cores depends on the scheduler more than the backend.
  comm_wait = sync->sum({comm_wait})[0] / size;
  if (rank == 0) {
    double samples_per_s =
        measured_steps > 0 ? measured_steps * accum * loader_options.batch_size * size / measured_time : NAN;
    std::ostringstream line;
    line << "{\"summary\": true, \"backend\": \"" << sync->name() << "\", \"ranks\": " << size << ", \"config\": \""
         << config.name << "\", \"parameters\": " << albert::parameter_count(*model) << ", \"steps\": " << steps
         << ", \"final_loss\": " << json_number(last_loss) << ", \"samples_per_s\": " << json_number(samples_per_s)
         << ", \"comm_wait_s\": " << json_number(comm_wait) << ", \"num_workers\": " << loader_options.num_workers
         << "}";
    log << line.str() << "\n";
    std::cout << line.str() << "\n" << std::flush;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "albert_mlm: " << e.what() << "\n";
    return 1;
  }
}
