// Google Benchmark micro-benchmarks of the building blocks:
//  - reduction kernels per type and instruction set, against memcpy of the same data: "bytes_per_second"
//    counts memory traffic (reduce: read a, read b, write dst = 3 x buffer; memcpy: 2 x buffer), so
//    reduce / memcpy is the kernel's fraction of the memory bandwidth a copy reaches (scripts/bench/bench-compare
//    runs them as repetitions in random order, as a shared host's memory rate can move 2x within a minute);
//  - copying into a shared-memory segment;
//  - libfabric (tcp provider on loopback) ping-pong latency and streaming bandwidth between two endpoints;
//  - the per-call cost of choosing an allreduce's algorithm, which every call pays.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <vector>

#include "algo/select.hpp"
#include "reduce/reduce.hpp"
#include "transport/shm/shm_segment.hpp"
#include "transport/transport.hpp"

using namespace hiercoll;

namespace {

constexpr size_t kBufferBytes = 32 << 20;  // beyond the caches: memory-bound, as for gradients

// A buffer aligned to a cache line, as torch's CPU allocator and hiercoll's shared segments give (malloc's large
// blocks start 16 bytes into a page: every 64-byte load from them would straddle two lines).
struct LineBuffer {
  explicit LineBuffer(size_t bytes, int fill) : data_(static_cast<uint8_t*>(std::aligned_alloc(64, bytes))) {
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(data_.get(), fill, bytes);
  }
  uint8_t* data() { return data_.get(); }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data_;
};

void BM_Memcpy(benchmark::State& state) {
  LineBuffer src(kBufferBytes, 1), dst(kBufferBytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), kBufferBytes);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * kBufferBytes);
}
BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Reduce(benchmark::State& state) {
  auto type = static_cast<DataType>(state.range(0));
  auto isa = static_cast<reduce::Isa>(state.range(1));
  auto stores = static_cast<reduce::Stores>(state.range(2));
  if (!reduce::isa_supported(isa)) {
    state.SkipWithError("instruction set not supported by this CPU");
    return;
  }
  size_t count = kBufferBytes / dtype_size(type);
  LineBuffer a(kBufferBytes, 0), b(kBufferBytes, 0), dst(kBufferBytes, 0);
  for (auto _ : state) {
    reduce::reduce_with(isa, dst.data(), a.data(), b.data(), count, type, ReduceOp::kSum, stores);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 3 * kBufferBytes);
  state.SetLabel(std::string(to_string(type)) + " sum " + reduce::to_string(isa) +
                 (reduce::streamed(stores, kBufferBytes) ? ", streaming stores" : ", ordinary stores") +
                 (stores == reduce::Stores::kAuto ? "" : " (forced)"));
}
// Stores: kAuto, the path every caller takes (a 32 MB result streams past the caches where the last-level cache is
// 128 MB or less, reduce::stream_bytes()), and kCached, ordinary stores, to show what streaming gains.
BENCHMARK(BM_Reduce)
    ->ArgsProduct({{static_cast<int>(DataType::kFloat32), static_cast<int>(DataType::kFloat64),
                    static_cast<int>(DataType::kFloat16), static_cast<int>(DataType::kBFloat16),
                    static_cast<int>(DataType::kInt8), static_cast<int>(DataType::kInt32)},
                   {static_cast<int>(reduce::Isa::kScalar), static_cast<int>(reduce::Isa::kAvx2),
                    static_cast<int>(reduce::Isa::kAvx512)},
                   {static_cast<int>(reduce::Stores::kAuto), static_cast<int>(reduce::Stores::kCached)}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_ShmCopyIn(benchmark::State& state) {
  auto segment = transport::ShmSegment::create("micro-bench", kBufferBytes);
  std::vector<uint8_t> src(kBufferBytes, 1);
  for (auto _ : state) {
    std::memcpy(segment.data(), src.data(), kBufferBytes);
    benchmark::DoNotOptimize(segment.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * kBufferBytes);
}
BENCHMARK(BM_ShmCopyIn)->Unit(benchmark::kMillisecond)->UseRealTime();

// Two endpoints in this process, both driven by this thread.
struct FabricPair {
  std::unique_ptr<transport::Endpoint> a, b;
  FabricPair() {
    transport::FabricOptions options;
    options.provider = "tcp";
    options.interface = "lo";
    a = transport::open_fabric_endpoint(options);
    b = transport::open_fabric_endpoint(options);
    std::vector<std::vector<uint8_t>> addresses = {a->address(), b->address()};
    a->connect(0, addresses);
    b->connect(1, addresses);
  }
  void wait(const transport::RequestPtr& request) {
    while (!request->done()) {
      a->progress(std::chrono::microseconds(0));
      b->progress(std::chrono::microseconds(0));
    }
    if (request->state != transport::Request::State::kDone) throw std::runtime_error(request->error);
  }
};

void BM_FabricPingPong(benchmark::State& state) {
  FabricPair pair;
  size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<uint8_t> x(bytes + 1), y(bytes + 1);
  for (auto _ : state) {
    auto r1 = pair.b->irecv(0, 1, 0, y.data(), bytes);
    auto s1 = pair.a->isend(1, 1, x.data(), bytes);
    pair.wait(r1);
    pair.wait(s1);
    auto r2 = pair.a->irecv(1, 2, 0, x.data(), bytes);
    auto s2 = pair.b->isend(0, 2, y.data(), bytes);
    pair.wait(r2);
    pair.wait(s2);
  }
  state.SetLabel("time is one round trip: one-way latency is half");
}
BENCHMARK(BM_FabricPingPong)->Arg(8)->Arg(4096)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_FabricStream(benchmark::State& state) {
  FabricPair pair;
  size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<uint8_t> x(bytes), y(bytes);
  for (auto _ : state) {
    auto r = pair.b->irecv(0, 3, 0, y.data(), bytes);
    auto s = pair.a->isend(1, 3, x.data(), bytes);
    pair.wait(r);
    pair.wait(s);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_FabricStream)->Arg(1 << 20)->Arg(16 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();

// The selector's choice for an allreduce of `range(0)` bytes, asked again and again as a training loop does: one
// node of 2 ranks (the one-shot allreduce, where the whole call costs a few hundred nanoseconds), and 2 x 2.
void BM_AllreduceChoice(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(1));
  std::vector<std::string> ids;
  for (int n = 0; n < nodes; ++n) ids.insert(ids.end(), 2, "node" + std::to_string(n));
  const algo::Selector selector(algo::CostModel::from(base::Settings::defaults()),
                                         Layout::from_node_ids(ids, 0), true);
  const auto bytes = static_cast<size_t>(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(selector.choose(algo::Kind::kAllreduce, bytes, false));
}
BENCHMARK(BM_AllreduceChoice)->Args({8, 1})->Args({1 << 20, 1})->Args({8, 2})->Unit(benchmark::kNanosecond);

}  // namespace

BENCHMARK_MAIN();
