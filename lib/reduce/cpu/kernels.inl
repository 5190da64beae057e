// Reduction kernels, included once per instruction set by kernels_<isa>.cpp with HIERCOLL_ISA_NS set.
// The loops are written so the compiler vectorises them for the flags of that file; only the fp16
// conversion uses intrinsics (F16C), because compilers do not vectorise software half conversion.
//
// Phases for fp16/bf16: (1) widen a block of both inputs to fp32 in L1-sized scratch, (2) reduce the
// block in fp32 with the float kernel, (3) round the block back to 16 bits into dst.
#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "reduce/cpu/half.hpp"
#include "reduce/cpu/kernel_table.hpp"

namespace hiercoll::reduce::HIERCOLL_ISA_NS {
namespace {

// Integer arithmetic goes through the unsigned type: wrap-around is defined there.
template <typename T, bool = std::is_integral_v<T>>
struct ArithOf {
  using type = T;
};
template <typename T>
struct ArithOf<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <typename T>
using Arith = typename ArithOf<T>::type;

struct Sum {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(static_cast<Arith<T>>(a) + static_cast<Arith<T>>(b));
  }
};
struct Prod {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(static_cast<Arith<T>>(a) * static_cast<Arith<T>>(b));
  }
};
struct Min {
  template <typename T>
  static T apply(T a, T b) {
    return a < b ? a : b;
  }
};
struct Max {
  template <typename T>
  static T apply(T a, T b) {
    return a > b ? a : b;
  }
};

template <typename T, typename Op>
void reduce_plain(void* dst, const void* a, const void* b, size_t count) {
  auto* d = static_cast<T*>(dst);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < count; ++i) d[i] = Op::apply(x[i], y[i]);
}

constexpr size_t kBlock = 1024;

void widen_half(float* out, const uint16_t* in, size_t n) {
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) out[i] = detail::half_to_float(in[i]);
}

void narrow_half(uint16_t* out, const float* in, size_t n) {
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
#endif
  for (; i < n; ++i) out[i] = detail::float_to_half(in[i]);
}

void widen_bf16(float* out, const uint16_t* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = detail::bf16_to_float(in[i]);
}
void narrow_bf16(uint16_t* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = detail::float_to_bf16(in[i]);
}

template <void (*Widen)(float*, const uint16_t*, size_t), void (*Narrow)(uint16_t*, const float*, size_t), typename Op>
void reduce_16bit(void* dst, const void* a, const void* b, size_t count) {
  alignas(64) float fa[kBlock];
  alignas(64) float fb[kBlock];
  auto* d = static_cast<uint16_t*>(dst);
  auto* x = static_cast<const uint16_t*>(a);
  auto* y = static_cast<const uint16_t*>(b);
  for (size_t start = 0; start < count; start += kBlock) {
    size_t n = std::min(kBlock, count - start);
    Widen(fa, x + start, n);
    Widen(fb, y + start, n);
    for (size_t i = 0; i < n; ++i) fa[i] = Op::apply(fa[i], fb[i]);
    Narrow(d + start, fa, n);
  }
}

template <typename T>
void divide_plain(void* buffer, size_t count, int divisor) {
  auto* p = static_cast<T*>(buffer);
  const T d = static_cast<T>(divisor);
  for (size_t i = 0; i < count; ++i) p[i] = p[i] / d;
}

template <void (*Widen)(float*, const uint16_t*, size_t), void (*Narrow)(uint16_t*, const float*, size_t)>
void divide_16bit(void* buffer, size_t count, int divisor) {
  alignas(64) float f[kBlock];
  auto* p = static_cast<uint16_t*>(buffer);
  const float d = static_cast<float>(divisor);
  for (size_t start = 0; start < count; start += kBlock) {
    size_t n = std::min(kBlock, count - start);
    Widen(f, p + start, n);
    for (size_t i = 0; i < n; ++i) f[i] = f[i] / d;
    Narrow(p + start, f, n);
  }
}

template <typename T>
void fill_row(KernelTable& table, DataType type) {
  auto t = static_cast<size_t>(type);
  table.reduce[t][static_cast<size_t>(ReduceOp::kSum)] = reduce_plain<T, Sum>;
  table.reduce[t][static_cast<size_t>(ReduceOp::kProd)] = reduce_plain<T, Prod>;
  table.reduce[t][static_cast<size_t>(ReduceOp::kMin)] = reduce_plain<T, Min>;
  table.reduce[t][static_cast<size_t>(ReduceOp::kMax)] = reduce_plain<T, Max>;
  table.reduce[t][static_cast<size_t>(ReduceOp::kAvg)] = reduce_plain<T, Sum>;
  if constexpr (std::is_floating_point_v<T>) table.divide[t] = divide_plain<T>;
}

template <void (*Widen)(float*, const uint16_t*, size_t), void (*Narrow)(uint16_t*, const float*, size_t)>
void fill_16bit_row(KernelTable& table, DataType type) {
  auto t = static_cast<size_t>(type);
  table.reduce[t][static_cast<size_t>(ReduceOp::kSum)] = reduce_16bit<Widen, Narrow, Sum>;
  table.reduce[t][static_cast<size_t>(ReduceOp::kProd)] = reduce_16bit<Widen, Narrow, Prod>;
  table.reduce[t][static_cast<size_t>(ReduceOp::kMin)] = reduce_16bit<Widen, Narrow, Min>;
  table.reduce[t][static_cast<size_t>(ReduceOp::kMax)] = reduce_16bit<Widen, Narrow, Max>;
  table.reduce[t][static_cast<size_t>(ReduceOp::kAvg)] = reduce_16bit<Widen, Narrow, Sum>;
  table.divide[t] = divide_16bit<Widen, Narrow>;
}

}  // namespace

KernelTable make_kernel_table() {
  KernelTable table{};
  fill_row<float>(table, DataType::kFloat32);
  fill_row<double>(table, DataType::kFloat64);
  fill_row<int8_t>(table, DataType::kInt8);
  fill_row<uint8_t>(table, DataType::kUInt8);
  fill_row<int32_t>(table, DataType::kInt32);
  fill_row<int64_t>(table, DataType::kInt64);
  fill_16bit_row<widen_half, narrow_half>(table, DataType::kFloat16);
  fill_16bit_row<widen_bf16, narrow_bf16>(table, DataType::kBFloat16);
  return table;
}

}  // namespace hiercoll::reduce::HIERCOLL_ISA_NS
