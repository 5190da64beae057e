#include "corpus.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace albert {

namespace {

/// Runs `argv` with stdin/stdout redirected to files (empty: inherited); throws if it fails.
void run(const std::vector<std::string>& argv, const std::string& in = "", const std::string& out = "") {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!in.empty()) posix_spawn_file_actions_addopen(&actions, 0, in.c_str(), O_RDONLY, 0);
  if (!out.empty()) posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    throw std::runtime_error("cannot run " + argv[0] + " (install Debian's sentencepiece package): " +
                             std::strerror(rc));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error(argv[0] + " failed (status " + std::to_string(status) + ")");
  }
}

std::string model_prefix(const std::string& model_path) {
  const std::string suffix = ".model";
  if (model_path.size() <= suffix.size() || model_path.compare(model_path.size() - suffix.size(), suffix.size(), suffix)) {
    throw std::invalid_argument("tokenizer path must end in .model: " + model_path);
  }
  return model_path.substr(0, model_path.size() - suffix.size());
}

}  // namespace

void prepare_tokens(const std::string& corpus, const std::string& model_path, int vocab_size,
                    const std::string& ids_path) {
  namespace fs = std::filesystem;
  if (!fs::exists(model_path)) {
    // pad=0 unk=1, then [CLS] [SEP] [MASK] as 2, 3, 4 (SpecialTokens); no BOS/EOS.
    run({"spm_train", "--input=" + corpus, "--model_prefix=" + model_prefix(model_path),
         "--vocab_size=" + std::to_string(vocab_size), "--model_type=unigram", "--character_coverage=1.0",
         "--pad_id=0", "--unk_id=1", "--bos_id=-1", "--eos_id=-1", "--user_defined_symbols=[CLS],[SEP],[MASK]",
         "--num_threads=2", "--input_sentence_size=2000000", "--minloglevel=2"},
        "", "/dev/null");
  }
  // Written under temporary names and renamed: other ranks read them once rank 0 says they are complete.
  run({"spm_export_vocab", "--model=" + model_path}, "", ids_path + ".vocab.tmp");
  fs::rename(ids_path + ".vocab.tmp", ids_path + ".vocab");
  run({"spm_encode", "--model=" + model_path, "--output_format=id"}, corpus, ids_path + ".tmp");
  fs::rename(ids_path + ".tmp", ids_path);
}

TokenisedCorpus load_tokens(const std::string& ids_path, int64_t seq_len) {
  if (seq_len < 8) throw std::invalid_argument("sequence length must be at least 8");
  const SpecialTokens special;

  // The vocabulary, to check the special tokens sit where the masking expects them.
  std::ifstream vocab(ids_path + ".vocab");
  std::vector<std::string> pieces;
  for (std::string line; std::getline(vocab, line);) pieces.push_back(line.substr(0, line.find('\t')));
  if (pieces.size() <= 5 || pieces[special.cls] != "[CLS]" || pieces[special.sep] != "[SEP]" ||
      pieces[special.mask] != "[MASK]") {
    throw std::runtime_error("the tokenizer behind " + ids_path + " lacks [CLS] [SEP] [MASK] at ids 2-4; let the trainer train it");
  }

  std::ifstream in(ids_path);
  if (!in) throw std::runtime_error("cannot read token ids " + ids_path);
  std::vector<int32_t> stream;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ids(line);
    bool any = false;
    for (int32_t id; ids >> id;) {
      stream.push_back(id);
      any = true;
    }
    if (any) stream.push_back(special.sep);
  }

  TokenisedCorpus out;
  out.seq_len = seq_len;
  out.vocab_size = static_cast<int64_t>(pieces.size());
  const int64_t body = seq_len - 2;
  for (size_t start = 0; start + body <= stream.size(); start += body) {
    out.tokens.push_back(special.cls);
    out.tokens.insert(out.tokens.end(), stream.begin() + start, stream.begin() + start + body);
    out.tokens.push_back(special.sep);
  }
  if (out.sequences() == 0) throw std::runtime_error("the corpus is too short for one sequence of " + std::to_string(seq_len));
  return out;
}

}  // namespace albert
