#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>
#include <utility>

#include "hiercoll/errors.hpp"
#include "reduce/cuda/reduce_cuda.hpp"

namespace hiercoll::reduce::cuda {

namespace {

// The type arithmetic happens in: fp32 for the 16-bit floats; unsigned for integers, so sums and
// products wrap instead of overflowing (undefined for signed types).
template <class T>
struct Arith {
  using type = T;
};
template <>
struct Arith<__half> {
  using type = float;
};
template <>
struct Arith<__nv_bfloat16> {
  using type = float;
};
template <>
struct Arith<int8_t> {
  using type = uint8_t;
};
template <>
struct Arith<int32_t> {
  using type = uint32_t;
};
template <>
struct Arith<int64_t> {
  using type = uint64_t;
};

template <class T>
__device__ __forceinline__ typename Arith<T>::type widen(T x) {
  return static_cast<typename Arith<T>::type>(x);
}
template <>
__device__ __forceinline__ float widen(__half x) {
  return __half2float(x);
}
template <>
__device__ __forceinline__ float widen(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <class T>
__device__ __forceinline__ T narrow(typename Arith<T>::type x) {
  return static_cast<T>(x);
}
template <>
__device__ __forceinline__ __half narrow<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

template <ReduceOp Op, class T>
__device__ __forceinline__ T combine(T x, T y) {
  using A = typename Arith<T>::type;
  if constexpr (Op == ReduceOp::kSum || Op == ReduceOp::kAvg) {
    return narrow<T>(static_cast<A>(widen(x) + widen(y)));
  } else if constexpr (Op == ReduceOp::kProd) {
    return narrow<T>(static_cast<A>(widen(x) * widen(y)));
  } else if constexpr (Op == ReduceOp::kMin) {
    // Compare in the element's own signedness (the unsigned arithmetic type would misorder negatives).
    if constexpr (std::is_integral_v<T>) return x < y ? x : y;
    else return narrow<T>(fminf(widen(x), widen(y)));
  } else {
    if constexpr (std::is_integral_v<T>) return x > y ? x : y;
    else return narrow<T>(fmaxf(widen(x), widen(y)));
  }
}
template <>
__device__ __forceinline__ double combine<ReduceOp::kMin, double>(double x, double y) {
  return fmin(x, y);
}
template <>
__device__ __forceinline__ double combine<ReduceOp::kMax, double>(double x, double y) {
  return fmax(x, y);
}

// Vectorised: each thread moves 16 bytes of each operand per iteration, the widest load a thread can issue.
template <class T, ReduceOp Op>
__global__ void reduce_vectorised(T* dst, const T* a, const T* b, size_t count) {
  constexpr int kPerVector = 16 / sizeof(T);
  const size_t vectors = count / kPerVector;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (size_t v = first; v < vectors; v += stride) {
    uint4 va = reinterpret_cast<const uint4*>(a)[v];
    uint4 vb = reinterpret_cast<const uint4*>(b)[v];
    T ea[kPerVector], eb[kPerVector];
    memcpy(ea, &va, 16);
    memcpy(eb, &vb, 16);
#pragma unroll
    for (int k = 0; k < kPerVector; ++k) ea[k] = combine<Op>(ea[k], eb[k]);
    memcpy(&va, ea, 16);
    reinterpret_cast<uint4*>(dst)[v] = va;
  }
  for (size_t i = vectors * kPerVector + first; i < count; i += stride) dst[i] = combine<Op>(a[i], b[i]);
}

template <class T, ReduceOp Op>
__global__ void reduce_elementwise(T* dst, const T* a, const T* b, size_t count) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    dst[i] = combine<Op>(a[i], b[i]);
  }
}

// Up to kMaxSources operands in one pass: each element is read once from every source and written once,
// accumulated in the arithmetic type and rounded once (as the host kernels do per call).
struct Sources {
  const void* pointers[kMaxSources];
};

template <ReduceOp Op, class T>
__device__ __forceinline__ typename Arith<T>::type combine_wide(typename Arith<T>::type x, typename Arith<T>::type y) {
  using A = typename Arith<T>::type;
  if constexpr (Op == ReduceOp::kSum || Op == ReduceOp::kAvg) {
    return static_cast<A>(x + y);
  } else if constexpr (Op == ReduceOp::kProd) {
    return static_cast<A>(x * y);
  } else {
    // min / max: in the element type, whose signedness orders correctly (see combine).
    return widen(combine<Op, T>(narrow<T>(x), narrow<T>(y)));
  }
}

// Up to kFixedSources sources, the count a template parameter: the pointers are loaded into registers once, and
// each thread's loads of one iteration (one 16-byte vector of every source) are all issued before any is used.
// The first version took the count at run time and indexed the parameter array with it, which put the array in
// local memory (a 128-byte stack frame) and cost a local load per source per vector, well short of a device
// copy's speed where this one reaches it (docs/gpu.md).
constexpr int kFixedSources = 8;

template <class T, ReduceOp Op, int N>
__global__ void reduce_fixed_vectorised(T* dst, Sources sources, size_t count) {
  using A = typename Arith<T>::type;
  constexpr int kPerVector = 16 / sizeof(T);
  const uint4* from[N];
#pragma unroll
  for (int j = 0; j < N; ++j) from[j] = static_cast<const uint4*>(sources.pointers[j]);
  const size_t vectors = count / kPerVector;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (size_t v = first; v < vectors; v += stride) {
    uint4 raw[N];
#pragma unroll
    for (int j = 0; j < N; ++j) raw[j] = __ldcg(from[j] + v);  // .cg: peers' memory, see reduce_many_vectorised
    T e[kPerVector];
    A acc[kPerVector];
    memcpy(e, &raw[0], 16);
#pragma unroll
    for (int k = 0; k < kPerVector; ++k) acc[k] = widen(e[k]);
#pragma unroll
    for (int j = 1; j < N; ++j) {
      memcpy(e, &raw[j], 16);
#pragma unroll
      for (int k = 0; k < kPerVector; ++k) acc[k] = combine_wide<Op, T>(acc[k], widen(e[k]));
    }
#pragma unroll
    for (int k = 0; k < kPerVector; ++k) e[k] = narrow<T>(acc[k]);
    memcpy(&raw[0], e, 16);
    reinterpret_cast<uint4*>(dst)[v] = raw[0];
  }
  for (size_t i = vectors * kPerVector + first; i < count; i += stride) {
    A acc = widen(static_cast<const T*>(sources.pointers[0])[i]);
#pragma unroll
    for (int j = 1; j < N; ++j) acc = combine_wide<Op, T>(acc, widen(static_cast<const T*>(sources.pointers[j])[i]));
    dst[i] = narrow<T>(acc);
  }
}

// More sources than kFixedSources (more than 8 local ranks): the count at run time, the loads of up to kLoadBatch
// sources issued before any is used.
constexpr int kLoadBatch = 8;

template <class T, ReduceOp Op>
__global__ void reduce_many_vectorised(T* dst, Sources sources, int source_count, size_t count) {
  using A = typename Arith<T>::type;
  constexpr int kPerVector = 16 / sizeof(T);
  const size_t vectors = count / kPerVector;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (size_t v = first; v < vectors; v += stride) {
    A acc[kPerVector];
    for (int base = 0; base < source_count; base += kLoadBatch) {
      uint4 raw[kLoadBatch];
#pragma unroll
      for (int j = 0; j < kLoadBatch; ++j) {
        // .cg loads (L2, not L1): sources are peers' memory, written by other kernels or processes.
        if (base + j < source_count) raw[j] = __ldcg(reinterpret_cast<const uint4*>(sources.pointers[base + j]) + v);
      }
#pragma unroll
      for (int j = 0; j < kLoadBatch; ++j) {
        if (base + j >= source_count) break;
        T e[kPerVector];
        memcpy(e, &raw[j], 16);
#pragma unroll
        for (int k = 0; k < kPerVector; ++k) {
          acc[k] = base + j == 0 ? widen(e[k]) : combine_wide<Op, T>(acc[k], widen(e[k]));
        }
      }
    }
    T out[kPerVector];
#pragma unroll
    for (int k = 0; k < kPerVector; ++k) out[k] = narrow<T>(acc[k]);
    uint4 raw;
    memcpy(&raw, out, 16);
    reinterpret_cast<uint4*>(dst)[v] = raw;
  }
  for (size_t i = vectors * kPerVector + first; i < count; i += stride) {
    A acc = widen(static_cast<const T*>(sources.pointers[0])[i]);
    for (int s = 1; s < source_count; ++s)
      acc = combine_wide<Op, T>(acc, widen(static_cast<const T*>(sources.pointers[s])[i]));
    dst[i] = narrow<T>(acc);
  }
}

template <class T, ReduceOp Op>
__global__ void reduce_many_elementwise(T* dst, Sources sources, int source_count, size_t count) {
  using A = typename Arith<T>::type;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    A acc = widen(static_cast<const T*>(sources.pointers[0])[i]);
    for (int s = 1; s < source_count; ++s)
      acc = combine_wide<Op, T>(acc, widen(static_cast<const T*>(sources.pointers[s])[i]));
    dst[i] = narrow<T>(acc);
  }
}

template <class T>
__global__ void divide_kernel(T* buffer, size_t count, float divisor) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    buffer[i] = narrow<T>(static_cast<typename Arith<T>::type>(widen(buffer[i]) / divisor));
  }
}
template <>
__global__ void divide_kernel<double>(double* buffer, size_t count, float divisor) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    buffer[i] /= static_cast<double>(divisor);
  }
}

constexpr int kThreads = 512;

// Enough blocks to fill the device a few times over; grid-stride loops cover the rest.
unsigned blocks_for(size_t work_items) {
  const size_t wanted = (work_items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(wanted < 1 ? 1 : (wanted > 4096 ? 4096 : wanted));
}

void check_launch(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw CudaError(std::string(what) + ": " + cudaGetErrorString(err));
}

template <class T, ReduceOp Op>
void launch(void* dst, const void* a, const void* b, size_t count, cudaStream_t stream) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  auto* d = static_cast<T*>(dst);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  if (aligned(dst) && aligned(a) && aligned(b)) {
    reduce_vectorised<T, Op><<<blocks_for(count / (16 / sizeof(T)) + 1), kThreads, 0, stream>>>(d, x, y, count);
  } else {
    reduce_elementwise<T, Op><<<blocks_for(count), kThreads, 0, stream>>>(d, x, y, count);
  }
  check_launch("reduce kernel launch");
}

template <class T, ReduceOp Op, int N>
void launch_fixed(T* dst, const Sources& sources, size_t count, cudaStream_t stream) {
  reduce_fixed_vectorised<T, Op, N>
      <<<blocks_for(count / (16 / sizeof(T)) + 1), kThreads, 0, stream>>>(dst, sources, count);
}

template <class T, ReduceOp Op>
void launch_many(void* dst, const Sources& sources, int source_count, size_t count, cudaStream_t stream) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  bool all_aligned = aligned(dst);
  for (int s = 0; s < source_count; ++s) all_aligned = all_aligned && aligned(sources.pointers[s]);
  auto* d = static_cast<T*>(dst);
  if (!all_aligned) {
    reduce_many_elementwise<T, Op><<<blocks_for(count), kThreads, 0, stream>>>(d, sources, source_count, count);
  } else {
    switch (source_count) {
      case 1: launch_fixed<T, Op, 1>(d, sources, count, stream); break;
      case 2: launch_fixed<T, Op, 2>(d, sources, count, stream); break;
      case 3: launch_fixed<T, Op, 3>(d, sources, count, stream); break;
      case 4: launch_fixed<T, Op, 4>(d, sources, count, stream); break;
      case 5: launch_fixed<T, Op, 5>(d, sources, count, stream); break;
      case 6: launch_fixed<T, Op, 6>(d, sources, count, stream); break;
      case 7: launch_fixed<T, Op, 7>(d, sources, count, stream); break;
      case 8: launch_fixed<T, Op, 8>(d, sources, count, stream); break;
      default:
        reduce_many_vectorised<T, Op>
            <<<blocks_for(count / (16 / sizeof(T)) + 1), kThreads, 0, stream>>>(d, sources, source_count, count);
    }
  }
  check_launch("reduce_many kernel launch");
}

template <class T>
void launch_many_op(void* dst, const Sources& sources, int source_count, size_t count, ReduceOp op,
                    cudaStream_t stream) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return launch_many<T, ReduceOp::kSum>(dst, sources, source_count, count, stream);
    case ReduceOp::kProd: return launch_many<T, ReduceOp::kProd>(dst, sources, source_count, count, stream);
    case ReduceOp::kMin: return launch_many<T, ReduceOp::kMin>(dst, sources, source_count, count, stream);
    case ReduceOp::kMax: return launch_many<T, ReduceOp::kMax>(dst, sources, source_count, count, stream);
  }
  throw InvalidUsageError("reduce_many: unknown reduce op");
}

template <class T>
void launch_op(void* dst, const void* a, const void* b, size_t count, ReduceOp op, cudaStream_t stream) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return launch<T, ReduceOp::kSum>(dst, a, b, count, stream);
    case ReduceOp::kProd: return launch<T, ReduceOp::kProd>(dst, a, b, count, stream);
    case ReduceOp::kMin: return launch<T, ReduceOp::kMin>(dst, a, b, count, stream);
    case ReduceOp::kMax: return launch<T, ReduceOp::kMax>(dst, a, b, count, stream);
  }
  throw InvalidUsageError("reduce: unknown reduce op");
}

}  // namespace

void reduce(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op, cudaStream_t stream) {
  if (count == 0) return;
  switch (type) {
    case DataType::kFloat32: return launch_op<float>(dst, a, b, count, op, stream);
    case DataType::kFloat64: return launch_op<double>(dst, a, b, count, op, stream);
    case DataType::kFloat16: return launch_op<__half>(dst, a, b, count, op, stream);
    case DataType::kBFloat16: return launch_op<__nv_bfloat16>(dst, a, b, count, op, stream);
    case DataType::kInt8: return launch_op<int8_t>(dst, a, b, count, op, stream);
    case DataType::kUInt8: return launch_op<uint8_t>(dst, a, b, count, op, stream);
    case DataType::kInt32: return launch_op<int32_t>(dst, a, b, count, op, stream);
    case DataType::kInt64: return launch_op<int64_t>(dst, a, b, count, op, stream);
  }
  throw InvalidUsageError("reduce: unknown data type");
}

void reduce_many(void* dst, const void* const* sources, int source_count, size_t count, DataType type, ReduceOp op,
                 cudaStream_t stream) {
  if (count == 0) return;
  if (source_count < 1) throw InvalidUsageError("reduce_many: no sources");
  // More sources than one launch takes: fold the rest into dst, which then leads the next launch.
  Sources batch{};
  int taken = 0, in_batch = 0;
  while (taken < source_count) {
    if (taken > 0) batch.pointers[in_batch++] = dst;
    while (in_batch < kMaxSources && taken < source_count) batch.pointers[in_batch++] = sources[taken++];
    switch (type) {
      case DataType::kFloat32: launch_many_op<float>(dst, batch, in_batch, count, op, stream); break;
      case DataType::kFloat64: launch_many_op<double>(dst, batch, in_batch, count, op, stream); break;
      case DataType::kFloat16: launch_many_op<__half>(dst, batch, in_batch, count, op, stream); break;
      case DataType::kBFloat16: launch_many_op<__nv_bfloat16>(dst, batch, in_batch, count, op, stream); break;
      case DataType::kInt8: launch_many_op<int8_t>(dst, batch, in_batch, count, op, stream); break;
      case DataType::kUInt8: launch_many_op<uint8_t>(dst, batch, in_batch, count, op, stream); break;
      case DataType::kInt32: launch_many_op<int32_t>(dst, batch, in_batch, count, op, stream); break;
      case DataType::kInt64: launch_many_op<int64_t>(dst, batch, in_batch, count, op, stream); break;
      default: throw InvalidUsageError("reduce_many: unknown data type");
    }
    in_batch = 0;
  }
}

void copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  // A one-source reduction of bytes: 16-byte vectors where both ends are aligned, bytes one by one otherwise.
  Sources from{};
  from.pointers[0] = src;
  launch_many<uint8_t, ReduceOp::kSum>(dst, from, 1, bytes, stream);
}

void divide(void* buffer, size_t count, DataType type, int divisor, cudaStream_t stream) {
  if (count == 0) return;
  const float d = static_cast<float>(divisor);
  switch (type) {
    case DataType::kFloat32:
      divide_kernel<float><<<blocks_for(count), kThreads, 0, stream>>>(static_cast<float*>(buffer), count, d);
      break;
    case DataType::kFloat64:
      divide_kernel<double><<<blocks_for(count), kThreads, 0, stream>>>(static_cast<double*>(buffer), count, d);
      break;
    case DataType::kFloat16:
      divide_kernel<__half><<<blocks_for(count), kThreads, 0, stream>>>(static_cast<__half*>(buffer), count, d);
      break;
    case DataType::kBFloat16:
      divide_kernel<__nv_bfloat16>
          <<<blocks_for(count), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(buffer), count, d);
      break;
    default: throw InvalidUsageError(std::string("divide: ") + to_string(type) + " is not a floating type");
  }
  check_launch("divide kernel launch");
}

namespace {

template <class K>
void load(K kernel) {
  cudaFuncAttributes attributes{};
  cudaError_t err = cudaFuncGetAttributes(&attributes, kernel);
  if (err != cudaSuccess) throw CudaError(std::string("loading the reduction kernels: ") + cudaGetErrorString(err));
}

template <class T, ReduceOp Op, int... N>
void load_fixed(std::integer_sequence<int, N...>) {
  (load(reduce_fixed_vectorised<T, Op, N + 1>), ...);
}

template <class T, ReduceOp Op>
void load_op() {
  load(reduce_vectorised<T, Op>);
  load(reduce_elementwise<T, Op>);
  load(reduce_many_vectorised<T, Op>);
  load(reduce_many_elementwise<T, Op>);
  load_fixed<T, Op>(std::make_integer_sequence<int, kFixedSources>{});
}

template <class T>
void load_type() {
  load_op<T, ReduceOp::kSum>();
  load_op<T, ReduceOp::kProd>();
  load_op<T, ReduceOp::kMin>();
  load_op<T, ReduceOp::kMax>();
}

}  // namespace

void load_kernels() {
  load_type<float>();
  load_type<double>();
  load_type<__half>();
  load_type<__nv_bfloat16>();
  load_type<int8_t>();
  load_type<uint8_t>();
  load_type<int32_t>();
  load_type<int64_t>();
  load(divide_kernel<float>);
  load(divide_kernel<double>);
  load(divide_kernel<__half>);
  load(divide_kernel<__nv_bfloat16>);
}

}  // namespace hiercoll::reduce::cuda
