// Host staging against a rail: whether the host can feed a network rail when device buffers cross nodes through
// pinned host memory (docs/gpu.md, "Host staging"). Per local rank and piece, the three things the inter-node phase
// adds on a GPU: the shard copied to pinned host memory (D2H), reduced on the CPU with what the network brought (a
// second pinned source, the library's own kernels; the inter-node ring's reductions come to (N-1)/N of one such pass
// per byte of shard), copied back (H2D). Ranks are processes sharing the GPU and the
// host's cores, each bound to its own CPU as hiercoll_launch binds them; every stage runs on all of them at once.
//
//   hiercoll_cuda_staging [--ranks 1,2,4,8] [--sizes 1M:64M] [--types fp32,bf16] [--bytes 512M] [--memory device|host]
//
// Per rank count, type and piece size, GB/s of piece per rank (the slowest rank's; the node's columns sum every
// rank's): each stage alone, then the three pipelined as the library runs them (one stream: the D2H of piece p+1 is
// enqueued before the host works on piece p, whose H2D follows on the same stream, so the two directions take
// turns) and with a stream per direction (the two copy engines at once: the ceiling). Each figure moves --bytes per
// rank after one piece of warm-up. Every piece that came back is checked against the sums computed here.
// --memory host replaces the device by host memory and the copies by memcpy (no GPU needed: how CI runs it).
#include <cuda_runtime_api.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "base/env.hpp"
#include "hiercoll/errors.hpp"
#include "hiercoll/types.hpp"
#include "reduce/reduce.hpp"

using namespace hiercoll;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kSlots = 3;        // pinned staging slots, as the library's peer memory has
constexpr int kDeviceSlots = 4;  // device pieces the copies cycle over
enum Stage { kD2H, kReduce, kH2D, kOneStream, kTwoStreams, kStages };
const char* const kStageNames[kStages] = {"D2H", "reduce", "H2D", "pipelined, one stream", "two streams"};
constexpr std::chrono::seconds kBarrierTimeout{120};

struct Options {
  std::vector<int> ranks{1, 2, 4, 8};
  std::vector<size_t> sizes;
  std::vector<DataType> types{DataType::kFloat32, DataType::kBFloat16};
  size_t bytes = size_t{512} << 20;
  bool device = true;
};

void mark_failed();  // tells the other ranks (below, with what the ranks share)

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "hiercoll_cuda_staging: %s\n", what.c_str());
  mark_failed();
  std::_Exit(1);
}

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) fail(std::string(what) + ": " + cudaGetErrorString(err));
}

// A byte count with an optional K, M or G (base::parse_bytes, as the library's knobs), not zero.
size_t parse_size(const std::string& text, const char* what) {
  size_t bytes = 0;
  try {
    bytes = base::parse_bytes(text, what);
  } catch (const Error& e) {
    fail(e.what());
  }
  if (bytes == 0) fail(std::string(what) + ": '" + text + "' is not a size (a number, then K, M or G)");
  return bytes;
}

std::vector<std::string> split(const std::string& text, char by) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t at; (at = text.find(by, start)) != std::string::npos; start = at + 1)
    out.push_back(text.substr(start, at - start));
  out.push_back(text.substr(start));
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  std::string sizes = "1M:64M";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) fail("option " + arg + " needs a value (see the header of bench/cuda/staging.cpp)");
    const std::string value = argv[++i];
    if (arg == "--ranks") {
      o.ranks.clear();
      for (const auto& r : split(value, ',')) {
        const int n = std::atoi(r.c_str());
        if (n < 1 || n > 64) fail("--ranks: '" + r + "' is not a rank count from 1 to 64");
        o.ranks.push_back(n);
      }
    } else if (arg == "--sizes") {
      sizes = value;
    } else if (arg == "--types") {
      o.types.clear();
      for (const auto& t : split(value, ',')) {
        if (t == "fp32") o.types.push_back(DataType::kFloat32);
        else if (t == "bf16") o.types.push_back(DataType::kBFloat16);
        else fail("--types: '" + t + "' is not fp32 or bf16");
      }
    } else if (arg == "--bytes") {
      o.bytes = parse_size(value, "--bytes");
    } else if (arg == "--memory") {
      if (value != "device" && value != "host") fail("--memory: '" + value + "' is not device or host");
      o.device = value == "device";
    } else {
      fail("unknown option " + arg + " (see the header of bench/cuda/staging.cpp)");
    }
  }
  const auto range = split(sizes, ':');
  if (range.size() > 2) fail("--sizes: '" + sizes + "' is not SIZE or FIRST:LAST");
  const size_t first = parse_size(range[0], "--sizes"), last = parse_size(range.back(), "--sizes");
  if (first > last) fail("--sizes: " + sizes + " runs backwards");
  for (size_t s = first; s <= last; s *= 2) o.sizes.push_back(s);
  return o;
}

// A futex on a word of the shared mapping (no FUTEX_PRIVATE_FLAG: the ranks are processes): blocks while `word`
// holds `value`, until a wake or `timeout`.
timespec timespec_of(std::chrono::milliseconds span) {
  return {static_cast<time_t>(span.count() / 1000), static_cast<long>(span.count() % 1000) * 1000000};
}

void futex_wait(std::atomic<int>& word, int value, std::chrono::milliseconds timeout) {
  const timespec limit = timespec_of(timeout);
  syscall(SYS_futex, reinterpret_cast<int*>(&word), FUTEX_WAIT, value, &limit, nullptr, 0);
}
void futex_wake_all(std::atomic<int>& word) {
  syscall(SYS_futex, reinterpret_cast<int*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// What the ranks share: a barrier that gives up (a rank that died must not leave the others waiting forever), and
// after it every rank's figures: seconds()[(rank * cases + case) * kStages + stage], in the mapping after it.
struct Shared {
  std::atomic<int> arrived{0};
  std::atomic<int> generation{0};
  std::atomic<int> failed{0};
  double* seconds() { return reinterpret_cast<double*>(this + 1); }
};
Shared* g_shared = nullptr;  // this process's view, for fail()
void mark_failed() {
  if (!g_shared) return;
  g_shared->failed.store(1);
  futex_wake_all(g_shared->generation);
}

// Waits for every rank: a few yields (the ranks of a stage end together), then asleep in the kernel until the last
// one wakes them, or a failure does (a failing rank, or the parent when one died, wakes the generation word).
void barrier(Shared& shared, int ranks) {
  const int generation = shared.generation.load();
  if (shared.arrived.fetch_add(1) + 1 == ranks) {
    shared.arrived.store(0);
    shared.generation.fetch_add(1);
    futex_wake_all(shared.generation);
    return;
  }
  const auto deadline = Clock::now() + kBarrierTimeout;
  for (int turn = 0; shared.generation.load() == generation; ++turn) {
    if (shared.failed.load() != 0) std::_Exit(1);  // another rank failed: its message says why
    if (Clock::now() > deadline) fail("a rank did not reach the barrier within 120 s");
    if (turn < 64) std::this_thread::yield();
    else futex_wait(shared.generation, generation, std::chrono::milliseconds(500));
  }
}

// The copies between device and pinned host memory, by direction: on one CUDA stream, on one per direction, or
// (host memory) memcpy done at once. wait() blocks the host until the copies enqueued before the last mark() of
// that direction and slot are done, polling and yielding as the library's host waits do.
class Copies {
 public:
  Copies(bool device, bool two_streams) : device_(device) {
    if (!device_) return;
    check(cudaStreamCreateWithFlags(&streams_[0], cudaStreamNonBlocking), "cudaStreamCreate");
    streams_[1] = streams_[0];
    if (two_streams) check(cudaStreamCreateWithFlags(&streams_[1], cudaStreamNonBlocking), "cudaStreamCreate");
    for (auto& direction : events_)
      for (auto& e : direction) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~Copies() {
    if (!device_) return;
    for (auto& direction : events_)
      for (auto& e : direction) cudaEventDestroy(e);
    if (streams_[1] != streams_[0]) cudaStreamDestroy(streams_[1]);
    cudaStreamDestroy(streams_[0]);
  }
  Copies(const Copies&) = delete;
  Copies& operator=(const Copies&) = delete;

  /// direction 0: device to host; 1: host to device. Marks `slot` of that direction after the copy.
  void copy(void* dst, const void* src, size_t bytes, int direction, int slot) {
    if (!device_) {
      std::memcpy(dst, src, bytes);
      return;
    }
    check(cudaMemcpyAsync(dst, src, bytes, direction == 0 ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                          streams_[direction]),
          "cudaMemcpyAsync");
    check(cudaEventRecord(events_[direction][slot], streams_[direction]), "cudaEventRecord");
  }
  void wait(int direction, int slot) {
    if (!device_) return;
    for (;;) {
      const cudaError_t state = cudaEventQuery(events_[direction][slot]);
      if (state == cudaSuccess) return;
      if (state != cudaErrorNotReady) check(state, "cudaEventQuery");
      std::this_thread::yield();
    }
  }
  void drain() {
    if (!device_) return;
    check(cudaStreamSynchronize(streams_[0]), "cudaStreamSynchronize");
    check(cudaStreamSynchronize(streams_[1]), "cudaStreamSynchronize");
  }

 private:
  bool device_;
  cudaStream_t streams_[2]{};
  cudaEvent_t events_[2][kSlots]{};
};

// One rank's memory for pieces of up to `piece` bytes: kDeviceSlots pieces of input and output "on the device",
// kSlots pinned staging and result slots, and the piece the network brought.
struct Buffers {
  bool device;
  size_t piece;
  uint8_t *in = nullptr, *out = nullptr, *received = nullptr;
  uint8_t *staged[kSlots]{}, *result[kSlots]{};

  Buffers(bool on_device, size_t bytes) : device(on_device), piece(bytes) {
    in = device_alloc(kDeviceSlots * piece);
    out = device_alloc(kDeviceSlots * piece);
    received = host_alloc(piece);
    for (int s = 0; s < kSlots; ++s) {
      staged[s] = host_alloc(piece);
      result[s] = host_alloc(piece);
    }
  }
  ~Buffers() {
    device_free(in);
    device_free(out);
    host_free(received);
    for (int s = 0; s < kSlots; ++s) {
      host_free(staged[s]);
      host_free(result[s]);
    }
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;

  uint8_t* device_alloc(size_t bytes) {
    void* p = nullptr;
    if (device) check(cudaMalloc(&p, bytes), "cudaMalloc");
    else if (!(p = std::malloc(bytes))) throw std::bad_alloc();
    return static_cast<uint8_t*>(p);
  }
  void device_free(void* p) { device ? (void)cudaFree(p) : std::free(p); }
  uint8_t* host_alloc(size_t bytes) {
    void* p = nullptr;
    if (device) check(cudaHostAlloc(&p, bytes, cudaHostAllocDefault), "cudaHostAlloc");
    else if (!(p = std::malloc(bytes))) throw std::bad_alloc();
    std::memset(p, 0, bytes);  // touched: no first-touch page faults inside a timed stage
    return static_cast<uint8_t*>(p);
  }
  void host_free(void* p) { device ? (void)cudaFreeHost(p) : std::free(p); }
};

size_t element_bytes(DataType t) { return t == DataType::kFloat32 ? 4 : 2; }

// Small integers: exact in fp32 and bf16, and so are their sums.
float input_value(size_t i) { return static_cast<float>(i % 61); }
float received_value(size_t i) { return static_cast<float>(i % 7 + 1); }

void fill(std::vector<uint8_t>& bytes, size_t count, DataType type, float (*value)(size_t), size_t first = 0) {
  bytes.resize(count * element_bytes(type));
  for (size_t i = 0; i < count; ++i) {
    const float v = value(first + i);
    if (type == DataType::kFloat32) std::memcpy(bytes.data() + 4 * i, &v, 4);
    else {
      const uint16_t b = reduce::float_to_bf16(v);
      std::memcpy(bytes.data() + 2 * i, &b, 2);
    }
  }
}

float element(const uint8_t* bytes, size_t i, DataType type) {
  if (type == DataType::kFloat32) {
    float v;
    std::memcpy(&v, bytes + 4 * i, 4);
    return v;
  }
  uint16_t b;
  std::memcpy(&b, bytes + 2 * i, 2);
  return reduce::bf16_to_float(b);
}

void upload(Buffers& b, void* dst, const std::vector<uint8_t>& src) {
  if (b.device) check(cudaMemcpy(dst, src.data(), src.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
  else std::memcpy(dst, src.data(), src.size());
}

// One stage on `pieces` pieces of `bytes`; returns the seconds it took. The pipelines reduce piece p on the host
// while the D2H of piece p+1 runs, as the library's hierarchical allreduce does on device buffers.
double run_stage(Stage stage, Buffers& b, Copies& copies, size_t bytes, size_t pieces, DataType type) {
  const size_t count = bytes / element_bytes(type);
  auto device_in = [&](size_t p) { return b.in + (p % kDeviceSlots) * bytes; };
  auto device_out = [&](size_t p) { return b.out + (p % kDeviceSlots) * bytes; };
  auto host_reduce = [&](int slot) {
    const void* sources[2] = {b.staged[slot], b.received};
    reduce::reduce_sources(b.result[slot], sources, 2, count, type, ReduceOp::kSum);
  };
  const auto start = Clock::now();
  switch (stage) {
    case kD2H:
      for (size_t p = 0; p < pieces; ++p) copies.copy(b.staged[p % kSlots], device_in(p), bytes, 0, p % kSlots);
      break;
    case kH2D:
      for (size_t p = 0; p < pieces; ++p) copies.copy(device_out(p), b.result[p % kSlots], bytes, 1, p % kSlots);
      break;
    case kReduce:
      for (size_t p = 0; p < pieces; ++p) host_reduce(static_cast<int>(p % kSlots));
      break;
    default: {
      bool pending_h2d[kSlots] = {};
      for (size_t p = 0; p <= pieces; ++p) {
        if (p < pieces) copies.copy(b.staged[p % kSlots], device_in(p), bytes, 0, p % kSlots);
        if (p == 0) continue;
        const int slot = static_cast<int>((p - 1) % kSlots);
        copies.wait(0, slot);
        if (pending_h2d[slot]) copies.wait(1, slot);  // the result slot's previous piece has left
        host_reduce(slot);
        copies.copy(device_out(p - 1), b.result[slot], bytes, 1, slot);
        pending_h2d[slot] = true;
      }
    }
  }
  copies.drain();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Every device output piece against the sums computed here (the pipelines wrote all kDeviceSlots of them).
void verify(Buffers& b, size_t bytes, DataType type, const char* what) {
  const size_t count = bytes / element_bytes(type);
  std::vector<uint8_t> back(kDeviceSlots * bytes);
  if (b.device) check(cudaMemcpy(back.data(), b.out, back.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  else std::memcpy(back.data(), b.out, back.size());
  for (size_t s = 0; s < kDeviceSlots; ++s)
    for (size_t i = 0; i < count; ++i) {
      const float want = input_value(s * count + i) + received_value(i);
      const float got = element(back.data() + s * bytes, i, type);
      if (got != want) {
        char text[200];
        std::snprintf(text, sizeof text, "%s, %zu-byte pieces: element %zu of device piece %zu is %g, not %g", what,
                      bytes, i, s, got, want);
        fail(text);
      }
    }
}

size_t cases(const Options& o) { return o.types.size() * o.sizes.size(); }

void rank_main(const Options& o, Shared& shared, int rank, int ranks, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
  if (o.device) check(cudaSetDevice(0), "cudaSetDevice");
  Buffers b(o.device, o.sizes.back());
  Copies one(o.device, false), two(o.device, true);
  size_t row = 0;
  for (DataType type : o.types) {
    for (size_t bytes : o.sizes) {
      const size_t elem = element_bytes(type);
      const size_t count = bytes / elem;
      std::vector<uint8_t> host;
      fill(host, kDeviceSlots * count, type, input_value);
      upload(b, b.in, host);
      fill(host, count, type, received_value);
      std::memcpy(b.received, host.data(), host.size());
      const size_t pieces = std::max<size_t>(4, o.bytes / bytes);
      for (int stage = 0; stage < kStages; ++stage) {
        Copies& copies = stage == kTwoStreams ? two : one;
        const bool pipelined = stage == kOneStream || stage == kTwoStreams;
        if (pipelined) {  // what the check below reads was written by this stage
          if (b.device) check(cudaMemset(b.out, 0, kDeviceSlots * bytes), "cudaMemset");
          else std::memset(b.out, 0, kDeviceSlots * bytes);
        }
        run_stage(static_cast<Stage>(stage), b, copies, bytes, 1, type);  // warm-up
        barrier(shared, ranks);
        shared.seconds()[(rank * cases(o) + row) * kStages + stage] =
            run_stage(static_cast<Stage>(stage), b, copies, bytes, pieces, type);
        barrier(shared, ranks);
        if (pipelined) verify(b, bytes, type, kStageNames[stage]);
      }
      ++row;
    }
  }
}

std::string human(size_t bytes) {
  return bytes >= (1 << 20) ? std::to_string(bytes >> 20) + " MB" : std::to_string(bytes >> 10) + " KB";
}

// Runs `ranks` processes; false if one failed or they ran past `limit`.
bool run_ranks(const Options& o, Shared& shared, int ranks, const std::vector<int>& cpus) {
  // SIGCHLD blocked, so that the parent sleeps in sigtimedwait until a rank ends or the deadline passes.
  sigset_t child;
  sigemptyset(&child);
  sigaddset(&child, SIGCHLD);
  sigprocmask(SIG_BLOCK, &child, nullptr);
  std::vector<pid_t> children;
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = fork();
    if (pid < 0) fail("fork failed");
    if (pid == 0) {
      sigprocmask(SIG_UNBLOCK, &child, nullptr);
      rank_main(o, shared, r, ranks, cpus[r % cpus.size()]);
      std::_Exit(0);
    }
    children.push_back(pid);
  }
  bool ok = true;
  const auto deadline = Clock::now() + std::chrono::minutes(10);
  size_t left = children.size();
  while (left > 0) {
    int status = 0;
    pid_t done;
    while (left > 0 && (done = waitpid(-1, &status, WNOHANG)) > 0) {
      --left;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        const auto rank = std::find(children.begin(), children.end(), done) - children.begin();
        if (ok) {  // the first to end badly; the others leave because of it
          std::fprintf(stderr, "hiercoll_cuda_staging: rank %td of %d %s %d\n", rank, ranks,
                       WIFEXITED(status) ? "exited with status" : "was killed by signal",
                       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        }
        ok = false;
        shared.failed.store(1);  // the others leave their barrier
        futex_wake_all(shared.generation);
      }
    }
    if (left == 0) break;
    const auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (remaining.count() <= 0) {
      std::fprintf(stderr, "hiercoll_cuda_staging: %d ranks ran past 10 minutes; stopping them\n", ranks);
      for (pid_t pid : children) kill(pid, SIGKILL);
      while (waitpid(-1, nullptr, 0) > 0) {
      }
      ok = false;
      break;
    }
    const timespec limit = timespec_of(remaining);
    sigtimedwait(&child, nullptr, &limit);  // a rank ended (or the deadline): reap above
  }
  sigprocmask(SIG_UNBLOCK, &child, nullptr);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  for (size_t bytes : o.sizes)
    for (DataType type : o.types)
      if (bytes % element_bytes(type) != 0) fail("--sizes: " + std::to_string(bytes) + " bytes is not whole elements");
  if (o.device) {
    // No CUDA call in this process: the ranks are forked, and a CUDA context does not survive a fork. A child asks
    // whether there is a device; a machine without one skips, as the CUDA tests do.
    const pid_t probe = fork();
    if (probe == 0) {
      int devices = 0;
      std::_Exit(cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0 ? 0 : 77);
    }
    int status = 0;
    if (probe < 0 || waitpid(probe, &status, 0) != probe || !WIFEXITED(status)) fail("the device probe failed");
    if (WEXITSTATUS(status) != 0) {
      std::puts("SKIPPED: no CUDA device here (--memory host runs without one)");
      return 77;
    }
  }
  cpu_set_t allowed;
  sched_getaffinity(0, sizeof allowed, &allowed);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  const int most = *std::max_element(o.ranks.begin(), o.ranks.end());
  const size_t mapped = sizeof(Shared) + sizeof(double) * most * cases(o) * kStages;
  std::printf(
      "# host staging: GB/s of piece per rank (the slowest rank's), %s; every rank moves %s per figure; "
      "%zu CPUs; one 100 Gbit/s rail = 12.5 GB/s, a p4d node (4 rails) = 50 GB/s\n",
      o.device ? "device buffers through pinned host memory" : "host memory standing in for the device",
      human(o.bytes).c_str(), cpus.size());
  bool ok = true;
  for (int ranks : o.ranks) {
    void* memory = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) fail("mmap of the ranks' shared page failed");
    auto* shared = new (memory) Shared{};
    g_shared = shared;
    std::printf("\n## %d rank%s, each bound to its own CPU%s\n\n", ranks, ranks > 1 ? "s" : "",
                ranks > static_cast<int>(cpus.size()) ? " (more ranks than CPUs: some share)" : "");
    if (!run_ranks(o, *shared, ranks, cpus)) {
      std::printf("(failed: see the messages above)\n");
      ok = false;
      munmap(memory, mapped);
      continue;
    }
    std::printf("| type | piece |");
    for (const char* name : kStageNames) std::printf(" %s |", name);
    std::printf(" node, one stream | node, two streams |\n|---|---|");
    for (int s = 0; s < kStages + 2; ++s) std::printf("---|");
    std::printf("\n");
    size_t row = 0;
    for (DataType type : o.types) {
      for (size_t bytes : o.sizes) {
        const double moved = static_cast<double>(std::max<size_t>(4, o.bytes / bytes) * bytes);
        double slowest[kStages], node[kStages] = {};
        for (int s = 0; s < kStages; ++s) {
          slowest[s] = INFINITY;
          for (int r = 0; r < ranks; ++r) {
            const double gbps = moved / shared->seconds()[(r * cases(o) + row) * kStages + s] / 1e9;
            slowest[s] = std::min(slowest[s], gbps);
            node[s] += gbps;
          }
        }
        std::printf("| %s | %s |", type == DataType::kFloat32 ? "fp32" : "bf16", human(bytes).c_str());
        for (double g : slowest) std::printf(" %.1f |", g);
        std::printf(" %.1f | %.1f |\n", node[kOneStream], node[kTwoStreams]);
        ++row;
      }
    }
    munmap(memory, mapped);
    std::fflush(stdout);
  }
  return ok ? 0 : 1;
}
