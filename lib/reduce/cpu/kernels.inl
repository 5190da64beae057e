// Reduction kernels, included once per instruction set by kernels_<isa>.cpp with HIERCOLL_ISA_NS set.
// The loops are written so the compiler vectorises them for the flags of that file. fp16 and bf16 are
// written with AVX2/F16C intrinsics where the file has them: each vector of 16-bit values is widened to fp32
// in registers, combined, and rounded back, in one pass over memory. (Widening blocks into an L1 scratch and
// reducing them there, as the scalar build does, made three passes and reached about 0.6 of memcpy's rate.)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
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

// lanes(): the same operation on eight floats (minps/maxps return the second operand when either is NaN, as
// `a < b ? a : b` does).
struct Sum {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(static_cast<Arith<T>>(a) + static_cast<Arith<T>>(b));
  }
#if defined(__AVX2__)
  static __m256 lanes(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
#endif
};
struct Prod {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(static_cast<Arith<T>>(a) * static_cast<Arith<T>>(b));
  }
#if defined(__AVX2__)
  static __m256 lanes(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
#endif
};
struct Min {
  template <typename T>
  static T apply(T a, T b) {
    return a < b ? a : b;
  }
#if defined(__AVX2__)
  static __m256 lanes(__m256 a, __m256 b) { return _mm256_min_ps(a, b); }
#endif
};
struct Max {
  template <typename T>
  static T apply(T a, T b) {
    return a > b ? a : b;
  }
#if defined(__AVX2__)
  static __m256 lanes(__m256 a, __m256 b) { return _mm256_max_ps(a, b); }
#endif
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

#if defined(__AVX2__) && defined(__F16C__)
// Eight fp16 values <-> one __m256 of fp32. Conversions round to nearest even, as the scalar ones.
struct HalfLanes {
  static __m256 load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void store(uint16_t* p, __m256 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

template <typename Lanes, float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float), typename Op>
void reduce_16bit_lanes(void* dst, const void* a, const void* b, size_t count) {
  auto* d = static_cast<uint16_t*>(dst);
  auto* x = static_cast<const uint16_t*>(a);
  auto* y = static_cast<const uint16_t*>(b);
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {  // two vectors per turn: the loads of the second overlap the first's work
    const __m256 lo = Op::lanes(Lanes::load(x + i), Lanes::load(y + i));
    const __m256 hi = Op::lanes(Lanes::load(x + i + 8), Lanes::load(y + i + 8));
    Lanes::store(d + i, lo);
    Lanes::store(d + i + 8, hi);
  }
  for (; i + 8 <= count; i += 8) Lanes::store(d + i, Op::lanes(Lanes::load(x + i), Lanes::load(y + i)));
  for (; i < count; ++i) d[i] = FromFloat(Op::apply(ToFloat(x[i]), ToFloat(y[i])));
}
#endif

#if defined(__AVX2__)
// bf16, sixteen at a time with no shuffle: in a vector of bf16 each 32-bit word holds an even element in its low
// half and the next odd one in its high half, and a bf16 in the high half of a word with a zero low half is that
// value as an fp32. Shifting left gives the even elements, masking off the low halves the odd ones; results go
// back the same way, so the order never changes. (Widening 8 at a time took a cross-lane shuffle per load and
// narrowing two more, all on one port: 0.82 of memcpy's traffic rate against fp16's 0.91, docs/benchmarks.md.)
template <typename Op>
void reduce_bf16_words(void* dst, const void* a, const void* b, size_t count) {
  auto* d = static_cast<uint16_t*>(dst);
  auto* x = static_cast<const uint16_t*>(a);
  auto* y = static_cast<const uint16_t*>(b);
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  // float_to_bf16's round to nearest even (add 0x7fff plus the lowest kept bit), the result in the high half. No NaN
  // case, unlike float_to_bf16: every NaN here is quiet with a zero low half (a widened bf16 NaN, quieted by the
  // operation, or the default NaN), so rounding cannot carry it into infinity.
  auto rounded = [&](__m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    return _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
  };
  auto even = [](__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); };
  auto odd = [&](__m256i v) { return _mm256_castsi256_ps(_mm256_and_si256(v, high)); };
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i vx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i vy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + i));
    const __m256i low_halves = _mm256_srli_epi32(rounded(Op::lanes(even(vx), even(vy))), 16);
    const __m256i high_halves = _mm256_and_si256(rounded(Op::lanes(odd(vx), odd(vy))), high);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), _mm256_or_si256(low_halves, high_halves));
  }
  for (; i < count; ++i) {
    d[i] = detail::float_to_bf16(Op::apply(detail::bf16_to_float(x[i]), detail::bf16_to_float(y[i])));
  }
}
#endif

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

#if defined(__AVX2__) && defined(__F16C__)
template <typename Lanes, float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void use_16bit_lanes(KernelTable& table, DataType type) {
  auto& row = table.reduce[static_cast<size_t>(type)];
  row[static_cast<size_t>(ReduceOp::kSum)] = reduce_16bit_lanes<Lanes, ToFloat, FromFloat, Sum>;
  row[static_cast<size_t>(ReduceOp::kProd)] = reduce_16bit_lanes<Lanes, ToFloat, FromFloat, Prod>;
  row[static_cast<size_t>(ReduceOp::kMin)] = reduce_16bit_lanes<Lanes, ToFloat, FromFloat, Min>;
  row[static_cast<size_t>(ReduceOp::kMax)] = reduce_16bit_lanes<Lanes, ToFloat, FromFloat, Max>;
  row[static_cast<size_t>(ReduceOp::kAvg)] = reduce_16bit_lanes<Lanes, ToFloat, FromFloat, Sum>;
}
#endif

// dst's whole 64-byte lines are written with non-temporal stores from the widest registers of this instruction set
// (SSE2, part of x86-64, in the scalar build); src may have any alignment.
void stream_copy(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<uint8_t*>(dst);
  auto* s = static_cast<const uint8_t*>(src);
  const size_t lead = std::min(bytes, (64 - reinterpret_cast<uintptr_t>(d) % 64) % 64);
  std::memcpy(d, s, lead);
  size_t i = lead;
  for (; i + 64 <= bytes; i += 64) {
#if defined(__AVX512F__)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i), _mm512_loadu_si512(s + i));
#elif defined(__AVX2__)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32)));
#else
    for (size_t k = 0; k < 64; k += 16) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + k), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + k)));
    }
#endif
  }
  std::memcpy(d + i, s + i, bytes - i);
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
  table.stream = stream_copy;
#if defined(__AVX2__) && defined(__F16C__)
  use_16bit_lanes<HalfLanes, detail::half_to_float, detail::float_to_half>(table, DataType::kFloat16);
  auto& bf16 = table.reduce[static_cast<size_t>(DataType::kBFloat16)];
  bf16[static_cast<size_t>(ReduceOp::kSum)] = reduce_bf16_words<Sum>;
  bf16[static_cast<size_t>(ReduceOp::kProd)] = reduce_bf16_words<Prod>;
  bf16[static_cast<size_t>(ReduceOp::kMin)] = reduce_bf16_words<Min>;
  bf16[static_cast<size_t>(ReduceOp::kMax)] = reduce_bf16_words<Max>;
  bf16[static_cast<size_t>(ReduceOp::kAvg)] = reduce_bf16_words<Sum>;
#endif
  return table;
}

}  // namespace hiercoll::reduce::HIERCOLL_ISA_NS
