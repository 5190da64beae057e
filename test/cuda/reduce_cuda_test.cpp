// The device reduction kernels against the host kernels (reduce.hpp), every type and op, aligned and
// misaligned buffers, in place. Exits 77 (CTest: skipped, shown as such) when no CUDA device is present.
#include "reduce/cuda/reduce_cuda.hpp"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "reduce/reduce.hpp"

using namespace hiercoll;

namespace {

int failures = 0;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

std::vector<uint8_t> random_bytes(size_t count, DataType type, std::mt19937& rng) {
  const size_t size = dtype_size(type);
  std::vector<uint8_t> out(count * size);
  std::uniform_real_distribution<float> real(-4.0f, 4.0f);
  std::uniform_int_distribution<int> small(-5, 5);
  for (size_t i = 0; i < count; ++i) {
    uint8_t* p = out.data() + i * size;
    switch (type) {
      case DataType::kFloat32: {
        float v = real(rng);
        std::memcpy(p, &v, 4);
        break;
      }
      case DataType::kFloat64: {
        double v = real(rng);
        std::memcpy(p, &v, 8);
        break;
      }
      case DataType::kFloat16: {
        uint16_t v = reduce::float_to_half(real(rng));
        std::memcpy(p, &v, 2);
        break;
      }
      case DataType::kBFloat16: {
        uint16_t v = reduce::float_to_bf16(real(rng));
        std::memcpy(p, &v, 2);
        break;
      }
      case DataType::kInt8: {
        int8_t v = static_cast<int8_t>(small(rng));
        std::memcpy(p, &v, 1);
        break;
      }
      case DataType::kUInt8: {
        uint8_t v = static_cast<uint8_t>(small(rng) + 5);
        std::memcpy(p, &v, 1);
        break;
      }
      case DataType::kInt32: {
        int32_t v = small(rng) * 1000003;
        std::memcpy(p, &v, 4);
        break;
      }
      case DataType::kInt64: {
        int64_t v = static_cast<int64_t>(small(rng)) << 40;
        std::memcpy(p, &v, 8);
        break;
      }
    }
  }
  return out;
}

void run_case(DataType type, ReduceOp op, size_t count, size_t offset, bool in_place, std::mt19937& rng) {
  const size_t size = dtype_size(type);
  auto a = random_bytes(count, type, rng), b = random_bytes(count, type, rng);
  std::vector<uint8_t> expected(count * size), got(count * size);
  reduce::reduce(expected.data(), a.data(), b.data(), count, type, op);

  // One allocation per operand, offset by `offset` elements to reach the misaligned path.
  const size_t bytes = (count + offset) * size + 16;
  void *va, *vb, *vd;
  check(cudaMalloc(&va, bytes), "cudaMalloc");
  check(cudaMalloc(&vb, bytes), "cudaMalloc");
  check(cudaMalloc(&vd, bytes), "cudaMalloc");
  auto *da = static_cast<uint8_t*>(va), *db = static_cast<uint8_t*>(vb), *dd = static_cast<uint8_t*>(vd);
  uint8_t *pa = da + offset * size, *pb = db + offset * size, *pd = in_place ? pa : dd + offset * size;
  check(cudaMemcpy(pa, a.data(), count * size, cudaMemcpyHostToDevice), "copy a");
  check(cudaMemcpy(pb, b.data(), count * size, cudaMemcpyHostToDevice), "copy b");
  reduce::cuda::reduce(pd, pa, pb, count, type, op, nullptr);
  check(cudaDeviceSynchronize(), "reduce");
  check(cudaMemcpy(got.data(), pd, count * size, cudaMemcpyDeviceToHost), "copy result");
  cudaFree(da);
  cudaFree(db);
  cudaFree(dd);
  if (got != expected) {
    ++failures;
    std::fprintf(stderr, "MISMATCH %s %s count=%zu offset=%zu in_place=%d\n", to_string(type), to_string(op), count,
                 offset, in_place);
  }
}

// The multi-source kernel (reduce_many): the reference folds the sources in order in the arithmetic the kernel
// documents: fp16/bf16 accumulated in fp32 and rounded once per launch of up to kMaxSources sources (the host
// kernels, which round after every pair, give it for the other types).
std::vector<uint8_t> fold_reference(const std::vector<std::vector<uint8_t>>& sources, size_t count, DataType type,
                                    ReduceOp op) {
  const size_t size = dtype_size(type);
  std::vector<uint8_t> out = sources[0];
  const bool half = type == DataType::kFloat16, bf16 = type == DataType::kBFloat16;
  if (!half && !bf16) {
    for (size_t k = 1; k < sources.size(); ++k)
      reduce::reduce(out.data(), out.data(), sources[k].data(), count, type, op);
    return out;
  }
  auto to_float = [&](const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return half ? reduce::half_to_float(v) : reduce::bf16_to_float(v);
  };
  auto from_float = [&](float f) { return half ? reduce::float_to_half(f) : reduce::float_to_bf16(f); };
  for (size_t i = 0; i < count; ++i) {
    size_t taken = 0;
    float acc = 0;
    while (taken < sources.size()) {
      // One launch: the running result (after the first) and then up to kMaxSources sources in all.
      int in_batch = 0;
      if (taken > 0) {
        acc = to_float(out.data() + i * size);
        ++in_batch;
      }
      for (; in_batch < reduce::cuda::kMaxSources && taken < sources.size(); ++in_batch, ++taken) {
        float x = to_float(sources[taken].data() + i * size);
        if (taken == 0) acc = x;
        else if (op == ReduceOp::kSum || op == ReduceOp::kAvg) acc = acc + x;
        else if (op == ReduceOp::kProd) acc = acc * x;
        else if (op == ReduceOp::kMin) acc = std::fmin(acc, x);
        else acc = std::fmax(acc, x);
      }
      uint16_t rounded = from_float(acc);
      std::memcpy(out.data() + i * size, &rounded, 2);
    }
  }
  return out;
}

void run_many_case(DataType type, ReduceOp op, size_t count, int n, bool misaligned, std::mt19937& rng) {
  const size_t size = dtype_size(type), shift = misaligned ? size : 0, bytes = count * size + 16;
  std::vector<std::vector<uint8_t>> host;
  std::vector<void*> allocations;
  std::vector<const void*> sources;
  for (int k = 0; k < n; ++k) {
    host.push_back(random_bytes(count, type, rng));
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    allocations.push_back(p);
    sources.push_back(static_cast<uint8_t*>(p) + shift);
    check(cudaMemcpy(static_cast<uint8_t*>(p) + shift, host.back().data(), count * size, cudaMemcpyHostToDevice),
          "copy source");
  }
  void* d = nullptr;
  check(cudaMalloc(&d, bytes), "cudaMalloc");
  reduce::cuda::reduce_many(static_cast<uint8_t*>(d) + shift, sources.data(), n, count, type, op, nullptr);
  check(cudaDeviceSynchronize(), "reduce_many");
  std::vector<uint8_t> got(count * size);
  check(cudaMemcpy(got.data(), static_cast<uint8_t*>(d) + shift, count * size, cudaMemcpyDeviceToHost), "copy result");
  for (void* p : allocations) cudaFree(p);
  cudaFree(d);
  auto expected = fold_reference(host, count, type, op);
  expected.resize(count * size);
  if (got != expected) {
    ++failures;
    std::fprintf(stderr, "MISMATCH reduce_many %s %s count=%zu sources=%d misaligned=%d\n", to_string(type),
                 to_string(op), count, n, misaligned);
  }
}

// The copy kernel against the bytes it was given: vectors where both ends are aligned, bytes one by one otherwise.
void run_copy_case(size_t bytes, size_t dst_shift, size_t src_shift, std::mt19937& rng) {
  std::vector<uint8_t> host(bytes);
  for (auto& b : host) b = static_cast<uint8_t>(rng());
  void *d = nullptr, *s = nullptr;
  check(cudaMalloc(&d, bytes + 16), "cudaMalloc");
  check(cudaMalloc(&s, bytes + 16), "cudaMalloc");
  check(cudaMemset(d, 0xAB, bytes + 16), "cudaMemset");
  check(cudaMemcpy(static_cast<uint8_t*>(s) + src_shift, host.data(), bytes, cudaMemcpyHostToDevice), "copy source");
  reduce::cuda::copy(static_cast<uint8_t*>(d) + dst_shift, static_cast<uint8_t*>(s) + src_shift, bytes, nullptr);
  std::vector<uint8_t> got(bytes + 16);
  check(cudaMemcpy(got.data(), d, bytes + 16, cudaMemcpyDeviceToHost), "copy result");
  cudaFree(d);
  cudaFree(s);
  bool ok = std::memcmp(got.data() + dst_shift, host.data(), bytes) == 0;
  for (size_t i = 0; i < bytes + 16; ++i) {  // nothing outside the destination is touched
    if (i < dst_shift || i >= dst_shift + bytes) ok = ok && got[i] == 0xAB;
  }
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "MISMATCH copy bytes=%zu dst+%zu src+%zu\n", bytes, dst_shift, src_shift);
  }
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  std::mt19937 rng(7);
  int cases = 0;
  for (int t = 0; t < kNumDataTypes; ++t) {
    for (int o = 0; o < kNumReduceOps; ++o) {
      const auto type = static_cast<DataType>(t);
      const auto op = static_cast<ReduceOp>(o);
      if (op == ReduceOp::kAvg && !is_floating(type)) continue;
      for (size_t count : {size_t{1}, size_t{7}, size_t{4096}, size_t{1000003}}) {
        for (size_t offset : {size_t{0}, size_t{1}}) {
          run_case(type, op, count, offset, offset == 0 && count == 4096, rng);
          ++cases;
        }
      }
    }
  }
  for (int t = 0; t < kNumDataTypes; ++t) {
    for (int o = 0; o < kNumReduceOps; ++o) {
      const auto type = static_cast<DataType>(t);
      const auto op = static_cast<ReduceOp>(o);
      if (op == ReduceOp::kAvg && !is_floating(type)) continue;
      for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17}) {  // every compile-time count, then the run-time kernel
        for (size_t count : {size_t{1}, size_t{4099}, size_t{262147}}) {
          run_many_case(type, op, count, n, count == 4099, rng);
          ++cases;
        }
      }
    }
  }
  for (size_t bytes : {size_t{1}, size_t{15}, size_t{16}, size_t{4099}, size_t{262147}}) {
    for (size_t dst_shift : {size_t{0}, size_t{1}}) {
      for (size_t src_shift : {size_t{0}, size_t{3}}) {
        run_copy_case(bytes, dst_shift, src_shift, rng);
        ++cases;
      }
    }
  }
  std::printf("%d cases, %d mismatches\n", cases, failures);
  return failures == 0 ? 0 : 1;
}
