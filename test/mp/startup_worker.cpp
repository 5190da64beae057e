// One rank of the start-up failure tests: creates a communicator through a store that can end this process at a
// chosen step, as a kill -9 would. Every step of start-up (publishing this rank's node and address, waiting for
// and reading everyone's, the node's shared-memory name) is a store call, so "the k-th store call" names a step;
// the init barrier comes after the last one. Polls that find nothing are not steps (see DyingStore::check).
//
//   HIERCOLL_TEST_VICTIM=r          the rank that dies (others survive)
//   HIERCOLL_TEST_DIE_AT_CALL=k     it dies just before its k-th store call (1-based) ...
//   HIERCOLL_TEST_DIE_AFTER_MS=d    ... or, if set, makes the k-th call and dies d ms later (in the init barrier,
//                                   or in the barriers that follow it)
//
// A survivor prints "STARTUP ERROR [code]: message" and "LEAKS threads=T fds=F": the threads and file descriptors
// it holds beyond what it held before (after one warm-up communicator, so libfabric's one-time set-up is not
// counted). Without a victim every rank prints "STARTUP OK calls=N watch_read_at=W", N being its number of store
// calls and W the one that read the peer watch's contact (it joins the watch right after).
#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "hiercoll/hiercoll.hpp"

using namespace hiercoll;

namespace {

int int_env(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : fallback;
}

int entries(const char* dir_path) {
  int count = 0;
  if (DIR* dir = opendir(dir_path)) {
    while (dirent* entry = readdir(dir)) count += entry->d_name[0] != '.';
    closedir(dir);
  }
  return count - (std::string(dir_path) == "/proc/self/fd");  // opendir's own descriptor
}

/// Forwards to `inner`, counting calls; ends the process at call `die_at` (0: never).
class DyingStore : public Store {
 public:
  DyingStore(std::shared_ptr<Store> inner, int die_at, int after_ms)
      : inner_(std::move(inner)), die_at_(die_at), after_ms_(after_ms) {
    set_timeout(inner_->timeout());
  }
  void set(const std::string& key, const Bytes& value) override {
    step();
    inner_->set(key, value);
  }
  Bytes get(const std::string& key) override {
    step();
    const std::string watch = "/watch";  // the communicator's keys arrive prefixed ("hiercoll/<name>#k/watch")
    if (key.size() >= watch.size() && key.compare(key.size() - watch.size(), watch.size(), watch) == 0)
      watch_read_at_ = calls_.load();
    return inner_->get(key);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    step();
    return inner_->add(key, delta);
  }
  // A wait polls check() until it finds its keys, as often as timing decides: only the check that finds them is a
  // step (the process ends as it returns), so steps count the same in every run.
  bool check(const std::vector<std::string>& keys) override {
    const bool present = inner_->check(keys);
    if (present) step();
    return present;
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    step();
    inner_->wait(keys, timeout);
  }
  // Start-up reads in slices until the key is there, as many as timing decides: only the read that returns is a
  // step, as for check().
  Bytes get_within(const std::string& key, std::chrono::milliseconds timeout) override {
    Bytes value = inner_->get_within(key, timeout);
    step();
    return value;
  }
  int calls() const { return calls_; }
  /// The call that read the peer watch's contact (0: none): the rank joins the watch right after it.
  int watch_read_at() const { return watch_read_at_; }
  /// Whether the call that ends the process has been made (its thread may not have run yet).
  bool doomed() const { return die_at_ > 0 && calls_ >= die_at_; }

 private:
  void step() {
    if (++calls_ != die_at_) return;
    if (after_ms_ < 0) _exit(9);
    std::thread([ms = after_ms_] {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      _exit(9);
    }).detach();
  }

  std::shared_ptr<Store> inner_;
  std::atomic<int> calls_{0};
  std::atomic<int> watch_read_at_{0};
  const int die_at_, after_ms_;
};

}  // namespace

int main() {
  const int victim = int_env("HIERCOLL_TEST_VICTIM", -1);
  CommOptions options = CommOptions::from_env();
  try {
    Rendezvous job = rendezvous_from_env(options.timeout);
    {  // warm-up: a communicator of one, on a store of its own
      char dir[] = "/tmp/hiercoll-startup-warmup-XXXXXX";
      if (!mkdtemp(dir)) return 2;
      CommOptions alone = options;
      alone.name = "warm-up";
      Communicator::create(std::make_shared<FileStore>(dir, options.timeout, true), 0, 1, alone).barrier().wait();
    }
    // Every rank starts the measured start-up together. Otherwise a rank whose process and warm-up came up seconds
    // late (ThreadSanitizer on 2 cores shared with another test) would make the others time out before the victim
    // reached its step, and they would report that timeout instead of the victim's death.
    job.store->set("startup-test/ready/" + std::to_string(job.rank), Store::Bytes{1});
    std::vector<std::string> ready;
    for (int r = 0; r < job.size; ++r) ready.push_back("startup-test/ready/" + std::to_string(r));
    job.store->wait(ready, std::chrono::minutes(2));
    const int threads_before = entries("/proc/self/task"), fds_before = entries("/proc/self/fd");
    const bool dies = job.rank == victim;
    auto store = std::make_shared<DyingStore>(job.store, dies ? int_env("HIERCOLL_TEST_DIE_AT_CALL", 0) : 0,
                                              dies ? int_env("HIERCOLL_TEST_DIE_AFTER_MS", -1) : -1);
    try {
      Communicator comm = Communicator::create(store, job.rank, job.size, options);
      // A victim that dies just after its last store call (on a thread of its own, so during the init barrier)
      // may get through the barrier first, or, on a slow machine (ThreadSanitizer on 2 loaded cores), its thread
      // may not even have run yet: it dies here then, before the collectives after start-up, so the survivors
      // meet a dead rank in one of them either way.
      if (store->doomed()) _exit(9);
      for (int i = 0; i < 500; ++i) comm.barrier().wait();
      std::printf("STARTUP OK calls=%d watch_read_at=%d\n", store->calls(), store->watch_read_at());
      return 0;
    } catch (const Error& e) {
      std::printf("STARTUP ERROR [%s]: %s\n", to_string(e.code()), e.what());
    }
    std::fflush(stdout);
    // Threads may take a moment to be reaped by the kernel after join.
    int threads = 0, fds = 0;
    for (int attempt = 0; attempt < 50; ++attempt) {
      threads = entries("/proc/self/task") - threads_before;
      fds = entries("/proc/self/fd") - fds_before;
      if (threads <= 0 && fds <= 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::printf("LEAKS threads=%d fds=%d\n", threads, fds);
    return 3;
  } catch (const Error& e) {
    std::printf("ERROR outside start-up [%s]: %s\n", to_string(e.code()), e.what());
    return 4;
  }
}
