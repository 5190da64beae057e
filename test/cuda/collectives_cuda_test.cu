// Every collective on CUDA device buffers, each rank against the serial reference (test/common/values.hpp),
// with ranks sharing the machine's GPUs (local rank modulo the device count: on a one-GPU machine they all
// share it, through CUDA IPC). Layouts: 2, 3 and 4 ranks on one node (intra-node phases on the GPU only),
// 2 emulated nodes x 2 ranks (the inter-node phase staged through pinned host memory over libfabric), 2 x 1
// (every collective staged), and 1 rank (device copies only). Arguments pick scenarios by index.
//
// Stream semantics are checked on the way: each input is written on the caller's stream by a kernel that
// first idles, so a collective that did not wait for the stream would read the poison underneath; results
// are read back on the same stream after Work::wait(), which must order the stream without blocking the host.
//
// Without a CUDA device it prints SKIPPED and exits 77, which CTest reports as skipped, never as passed.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collective_cases.hpp"
#include "expect.hpp"
#include "hiercoll/hiercoll.hpp"
#include "launcher.hpp"
#include "values.hpp"

using namespace hiercoll;
using hiercoll::test::expect_equal;
using hiercoll::test::expect_invalid;
using hiercoll::test::get;
using hiercoll::test::input_value;
using hiercoll::test::put;

namespace {

int& g_failures = hiercoll::test::failure_count();

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::printf("FAIL %s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

// Idles for `delay_ns`, then copies: work on the caller's stream that the collective must wait for.
__global__ void late_copy(uint8_t* dst, const uint8_t* src, size_t bytes, uint64_t delay_ns) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < delay_ns);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < bytes; i += stride) dst[i] = src[i];
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    check(cudaMalloc(&data_, bytes + 16), "cudaMalloc");
    check(cudaMemset(data_, 0xff, bytes + 16), "cudaMemset");  // poison: NaN / -1 in every type
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  uint8_t* data() const { return static_cast<uint8_t*>(data_); }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

struct Rank {
  Communicator comm;
  cudaStream_t stream = nullptr;
  int r, n;
};

std::vector<uint8_t> host_input(int rank, size_t count, DataType type, ReduceOp op, uint32_t seed, size_t first = 0) {
  std::vector<uint8_t> data(count * dtype_size(type) + 8);
  for (size_t i = 0; i < count; ++i) put(type, data.data(), i, input_value(rank, first + i, type, op, seed));
  return data;
}

// Puts `host` into `dst` on the rank's stream, behind an idle period (see the file comment).
void write_late(Rank& k, uint8_t* dst, const std::vector<uint8_t>& host, size_t bytes) {
  if (bytes == 0) return;
  DeviceBuffer source(bytes);
  check(cudaMemcpy(source.data(), host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy upload");
  late_copy<<<64, 256, 0, k.stream>>>(dst, source.data(), bytes, 200000);
  check(cudaGetLastError(), "late_copy launch");
  check(cudaStreamSynchronize(k.stream), "cudaStreamSynchronize");  // `source` goes out of scope next
}

std::vector<uint8_t> read_back(Rank& k, const uint8_t* src, size_t bytes) {
  std::vector<uint8_t> host(bytes + 8);
  if (bytes) check(cudaMemcpyAsync(host.data(), src, bytes, cudaMemcpyDeviceToHost, k.stream), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(k.stream), "cudaStreamSynchronize");
  return host;
}

// HIERCOLL_TEST_VERBOSE=1: each rank names every case as it starts it, so a hang shows where it is.
const bool g_verbose = std::getenv("HIERCOLL_TEST_VERBOSE") != nullptr;

std::string name(const char* op, DataType type, ReduceOp reduce_op, size_t count, bool in_place) {
  std::string what = std::string(op) + " " + to_string(type) + " " + to_string(reduce_op) +
                     " count=" + std::to_string(count) + (in_place ? " in-place" : " out-of-place");
  if (g_verbose) std::fprintf(stderr, "case %s\n", what.c_str());
  return what;
}

void run_allreduce(Rank& k) {
  CallOptions on{k.stream};
  uint32_t seed = 1;
  for (DataType type : hiercoll::test::all_types()) {
    for (ReduceOp op : hiercoll::test::all_ops()) {
      if (op == ReduceOp::kAvg && !is_floating(type)) continue;
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}, size_t{65537}, size_t{300001}}) {
        for (bool in_place : {false, true}) {
          ++seed;
          const size_t bytes = count * dtype_size(type);
          DeviceBuffer in(bytes), out(bytes);
          uint8_t* target = in_place ? in.data() : out.data();
          std::string what = name("allreduce", type, op, count, in_place);
          write_late(k, in.data(), host_input(k.r, count, type, op, seed), bytes);
          k.comm.allreduce(in.data(), target, count, type, op, on).wait();
          auto got = read_back(k, target, bytes);
          for (size_t i = 0; i < count; ++i) {
            expect_equal(what, type, op, got.data(), i, hiercoll::test::reference_value(k.n, i, type, op, seed));
          }
        }
      }
    }
  }
}

// One case of the shared table (collective_cases.hpp) on device buffers: the input written behind an idle period on
// the caller's stream, the output read back from it, every element against the serial reference.
void run_case(Rank& k, const hiercoll::test::CollectiveCase& c, const hiercoll::test::CaseArgs& a) {
  const size_t elem = dtype_size(a.type);
  const hiercoll::test::Placement p = hiercoll::test::placement(c, a);
  DeviceBuffer first(p.buffer_elems[0] * elem), second(p.buffer_elems[1] * elem);
  uint8_t* in = first.data() + p.in_at * elem;
  uint8_t* out = (a.in_place ? first.data() : second.data()) + p.out_at * elem;
  const size_t in_elems = c.in_elems(a), out_elems = c.out_elems(a);
  std::vector<uint8_t> host(in_elems * elem + 8);
  for (size_t i = 0; i < in_elems; ++i) put(a.type, host.data(), i, c.input(a, i));
  const std::string what = hiercoll::test::case_name(c, a);
  if (g_verbose) std::fprintf(stderr, "case %s\n", what.c_str());
  write_late(k, in, host, in_elems * elem);
  c.call(k.comm, a, in, out, CallOptions{k.stream}).wait();
  auto got = read_back(k, out, out_elems * elem);
  for (size_t i = 0; i < out_elems; ++i) {
    if (auto want = c.want(a, i)) expect_equal(what, a.type, a.op, got.data(), i, *want);
  }
}

// Every collective but allreduce (run_allreduce) from the shared table, in place and not, every root.
void run_others(Rank& k) {
  uint32_t seed = 1000;
  for (const auto& c : hiercoll::test::collective_cases()) {
    if (std::string(c.name) == "allreduce") continue;
    for (DataType type : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{4099}}) {
        hiercoll::test::for_each_run(c, k.r, k.n, type, count, {ReduceOp::kSum}, {false, true}, ++seed,
                                     [&](const hiercoll::test::CaseArgs& a) { run_case(k, c, a); });
      }
    }
  }
}

void run_semantics(Rank& k) {
  const size_t count = 1 << 20;
  DeviceBuffer data(count * 4);
  std::vector<float> host(count);
  // Work::wait() on device buffers returns before the operation completes: here the caller's stream holds
  // 300 ms of idling ahead of the allreduce, which therefore cannot have completed when wait() returns.
  for (size_t i = 0; i < count; ++i) host[i] = static_cast<float>((i % 13) + k.r);
  DeviceBuffer source(count * 4);
  check(cudaMemcpy(source.data(), host.data(), count * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  late_copy<<<64, 256, 0, k.stream>>>(data.data(), source.data(), count * 4, 300000000ull);
  Work work = k.comm.allreduce(data.data(), data.data(), count, DataType::kFloat32, ReduceOp::kSum, {k.stream});
  work.wait();
  if (work.is_completed()) {
    std::printf("FAIL Work::wait blocked the host until the device allreduce completed\n");
    ++g_failures;
  }
  std::vector<float> got(count);
  check(cudaMemcpyAsync(got.data(), data.data(), count * 4, cudaMemcpyDeviceToHost, k.stream), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(k.stream), "cudaStreamSynchronize");
  for (size_t i = 0; i < count; ++i) {
    double want = 0;
    for (int j = 0; j < k.n; ++j) want += static_cast<double>((i % 13) + j);
    if (got[i] != want && ++g_failures <= 10) std::printf("MISMATCH non-blocking wait element %zu\n", i);
  }
  work.wait_for(std::chrono::seconds(60));
  if (!work.is_completed() || work.error()) {
    std::printf("FAIL the non-blocking allreduce did not complete cleanly\n");
    ++g_failures;
  }

  // A completion callback runs once the device is done and not before, even when the Work is dropped (one rank:
  // nothing on the host finishes the operation but a watcher that the callback asks for).
  late_copy<<<64, 256, 0, k.stream>>>(data.data(), source.data(), count * 4, 200000000ull);
  auto called = std::make_shared<std::atomic<bool>>(false);
  k.comm.allreduce(data.data(), data.data(), count, DataType::kFloat32, ReduceOp::kSum, {k.stream})
      .on_completion([called] { *called = true; });
  if (*called) {
    std::printf("FAIL a completion callback ran while the caller's stream still held the operation\n");
    ++g_failures;
  }
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!*called && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!*called) {
    std::printf("FAIL the completion callback of a dropped Work never ran\n");
    ++g_failures;
  } else if (cudaStreamQuery(k.stream) == cudaErrorNotReady) {
    std::printf("FAIL the completion callback ran before the caller's stream got past the operation\n");
    ++g_failures;
  }

  // Local refusals (no rank communicates): mixed memory kinds, graph capture.
  std::vector<float> host_buffer(16);
  expect_invalid("host input, device output", "pass both in one kind of memory", [&] {
    k.comm.allreduce(host_buffer.data(), data.data(), 16, DataType::kFloat32, ReduceOp::kSum, {k.stream});
  });
  cudaStream_t capturing;
  check(cudaStreamCreateWithFlags(&capturing, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaStreamBeginCapture(capturing, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
  expect_invalid("allreduce during graph capture", "CUDA graph", [&] {
    k.comm.allreduce(data.data(), data.data(), 16, DataType::kFloat32, ReduceOp::kSum, {capturing});
  });
  cudaGraph_t graph = nullptr;
  check(cudaStreamEndCapture(capturing, &graph), "cudaStreamEndCapture");
  if (graph) cudaGraphDestroy(graph);
  cudaStreamDestroy(capturing);
}

int worker() {
  Rank k{Communicator::from_env()};
  k.r = k.comm.rank();
  k.n = k.comm.size();
  int devices = 0;
  check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  check(cudaSetDevice(k.comm.layout().local_rank % devices), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&k.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  try {
    run_allreduce(k);
    run_others(k);
    run_semantics(k);
    k.comm.barrier().wait();
  } catch (const std::exception& e) {
    std::printf("FAIL exception: %s\n", e.what());
    return 1;
  }
  std::printf("rank %d: %d failures\n", k.r, g_failures);
  return g_failures == 0 ? 0 : 1;
}

}  // namespace

// Usage: hiercoll_collectives_cuda_test [scenario index...] (default: all). HIERCOLL_TIMEOUT_MS overrides the
// ranks' timeout; HIERCOLL_TEST_VERBOSE=1 lets the ranks print to our terminal as they go.
int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "worker") return worker();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  struct Scenario {
    const char* name;
    int ranks;
    std::vector<int> node_of;
  };
  const std::vector<Scenario> scenarios = {{"2 ranks, 1 node", 2, {}},
                                           {"3 ranks, 1 node", 3, {}},
                                           {"4 ranks, 1 node", 4, {}},
                                           {"2 nodes x 2 ranks", 4, hiercoll::test::regular_nodes(2, 2)},
                                           {"2 nodes x 1 rank (staged)", 2, hiercoll::test::regular_nodes(2, 1)},
                                           {"1 rank (device copies)", 1, {}}};
  char self[4096] = {0};
  if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) {
    std::printf("FAIL readlink /proc/self/exe\n");
    return 1;
  }
  std::vector<size_t> chosen;
  for (int i = 1; i < argc; ++i) chosen.push_back(std::stoul(argv[i]));
  if (chosen.empty()) {
    for (size_t i = 0; i < scenarios.size(); ++i) chosen.push_back(i);
  }
  const char* timeout_ms = std::getenv("HIERCOLL_TIMEOUT_MS");
  int failed = 0;
  for (size_t index : chosen) {
    if (index >= scenarios.size()) {
      std::printf("FAIL no scenario %zu (there are %zu)\n", index, scenarios.size());
      return 1;
    }
    const Scenario& s = scenarios[index];
    hiercoll::test::LaunchOptions options;
    options.env = {{"HIERCOLL_FABRIC_PROVIDER", "tcp"},
                   {"HIERCOLL_FABRIC_IFACE", "lo"},
                   {"HIERCOLL_TIMEOUT_MS", timeout_ms ? timeout_ms : "120000"},
                   {"HIERCOLL_CUDA_PIECE_BYTES", "64K"}};  // many pieces: the pipeline and slot rotation run
    options.inherit_output = g_verbose;
    options.node_of = s.node_of;
    options.timeout = std::chrono::seconds(900);
    auto result = hiercoll::test::launch(s.ranks, self, {"worker"}, options);
    bool ok = result.all_ok();
    std::printf("%s: %s\n", s.name, ok ? "passed" : "FAILED");
    std::fflush(stdout);
    if (!ok) {
      std::printf("%s\n", result.report().c_str());
      ++failed;
    }
  }
  return failed == 0 ? 0 : 1;
}
