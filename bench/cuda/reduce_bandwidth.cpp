// Device reduction kernel bandwidth against a device-to-device copy on the same GPU and buffers.
// Traffic counted as in the host micro-benchmark: reduce reads 2 and writes 1 buffer, a copy reads 1 and
// writes 1; the multi-source kernel of the hierarchical allreduce (reduce_many) reads L and writes 1.
// Prints GB/s of traffic and the kernel's fraction of the copy's rate.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>

#include "reduce/cuda/reduce_cuda.hpp"

using namespace hiercoll;

namespace {
void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

template <class F>
double seconds_per_call(F&& call, int reps) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  call();  // warm-up
  check(cudaEventRecord(start), "record");
  for (int i = 0; i < reps; ++i) call();
  check(cudaEventRecord(stop), "record");
  check(cudaEventSynchronize(stop), "sync");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  return ms / 1e3 / reps;
}
}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256ull) << 20;
  const int reps = 20;
  constexpr int kMaxSources = 8;
  void* sources[kMaxSources];
  for (auto& p : sources) {
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    check(cudaMemset(p, 0, bytes), "memset");
  }
  void *a = sources[0], *b = sources[1], *d;
  check(cudaMalloc(&d, bytes), "cudaMalloc");
  const double copy_s =
      seconds_per_call([&] { check(cudaMemcpyAsync(d, a, bytes, cudaMemcpyDeviceToDevice), "copy"); }, reps);
  const double copy_gbs = 2.0 * bytes / copy_s / 1e9;
  std::printf("# %zu MiB buffers; traffic GB/s (reduce: 3 x bytes, copy: 2 x bytes)\n", bytes >> 20);
  std::printf("%-28s %10.1f GB/s  1.00\n", "cudaMemcpy D2D", copy_gbs);
  for (DataType type :
       {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16, DataType::kFloat64, DataType::kInt32}) {
    const size_t count = bytes / dtype_size(type);
    const double s =
        seconds_per_call([&] { reduce::cuda::reduce(d, a, b, count, type, ReduceOp::kSum, nullptr); }, reps);
    const double gbs = 3.0 * bytes / s / 1e9;
    std::printf("reduce sum %-17s %10.1f GB/s  %.2f\n", to_string(type), gbs, gbs / copy_gbs);
  }
  for (DataType type : {DataType::kFloat32, DataType::kBFloat16}) {
    for (int n : {2, 4, 8}) {
      const size_t count = bytes / dtype_size(type);
      const double s = seconds_per_call(
          [&] { reduce::cuda::reduce_many(d, sources, n, count, type, ReduceOp::kSum, nullptr); }, reps);
      const double gbs = (n + 1.0) * bytes / s / 1e9;
      char label[64];
      std::snprintf(label, sizeof(label), "reduce_many %d x %s", n, to_string(type));
      std::printf("%-28s %10.1f GB/s  %.2f\n", label, gbs, gbs / copy_gbs);
    }
  }
  return 0;
}
