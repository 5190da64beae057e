#pragma once
// Test-side element encoding, written independently of the library's own conversions: values are built
// from exponent and mantissa with frexp/ldexp, so the reference is "computed another way".
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "hiercoll/types.hpp"

namespace hiercoll::test {

// Rounds |a| to `precision` significant bits (ties to even) with exponent bias `bias`; returns bits.
inline uint16_t encode_small_float(double v, int mantissa_bits, int exponent_bits) {
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const int min_exp = 1 - bias;
  uint16_t sign = std::signbit(v) ? static_cast<uint16_t>(1u << (mantissa_bits + exponent_bits)) : 0;
  double a = std::fabs(v);
  if (std::isnan(v))
    return static_cast<uint16_t>(((1u << exponent_bits) - 1) << mantissa_bits | 1u << (mantissa_bits - 1));
  if (a == 0) return sign;
  int k;
  std::frexp(a, &k);  // a = f * 2^k, f in [0.5, 1)
  int e = k - 1;
  if (e < min_exp) {  // subnormal: steps of 2^(min_exp - mantissa_bits)
    double q = std::nearbyint(std::ldexp(a, mantissa_bits - min_exp));
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(q));
  }
  double q = std::nearbyint(std::ldexp(a, mantissa_bits - e));  // in [2^m, 2^(m+1)]
  if (q >= std::ldexp(1.0, mantissa_bits + 1)) {
    q /= 2;
    ++e;
  }
  if (e > bias) return static_cast<uint16_t>(sign | ((1u << exponent_bits) - 1) << mantissa_bits);  // infinity
  uint32_t mantissa = static_cast<uint32_t>(q) - (1u << mantissa_bits);
  return static_cast<uint16_t>(sign | static_cast<uint32_t>(e + bias) << mantissa_bits | mantissa);
}

inline double decode_small_float(uint16_t bits, int mantissa_bits, int exponent_bits) {
  const int bias = (1 << (exponent_bits - 1)) - 1;
  bool negative = bits >> (mantissa_bits + exponent_bits);
  int e = (bits >> mantissa_bits) & ((1 << exponent_bits) - 1);
  double mantissa = bits & ((1u << mantissa_bits) - 1);
  double magnitude;
  if (e == 0) {
    magnitude = std::ldexp(mantissa, 1 - bias - mantissa_bits);
  } else if (e == (1 << exponent_bits) - 1) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else {
    magnitude = std::ldexp(mantissa + std::ldexp(1.0, mantissa_bits), e - bias - mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

inline double get(DataType type, const void* data, size_t i) {
  switch (type) {
    case DataType::kFloat32: return static_cast<const float*>(data)[i];
    case DataType::kFloat64: return static_cast<const double*>(data)[i];
    case DataType::kFloat16: return decode_small_float(static_cast<const uint16_t*>(data)[i], 10, 5);
    case DataType::kBFloat16: return decode_small_float(static_cast<const uint16_t*>(data)[i], 7, 8);
    case DataType::kInt8: return static_cast<const int8_t*>(data)[i];
    case DataType::kUInt8: return static_cast<const uint8_t*>(data)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(data)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
  }
  return 0;
}

/// Stores v, rounding to nearest even for floating types (integers must be exact).
inline void put(DataType type, void* data, size_t i, double v) {
  switch (type) {
    case DataType::kFloat32: static_cast<float*>(data)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(data)[i] = v; break;
    case DataType::kFloat16: static_cast<uint16_t*>(data)[i] = encode_small_float(v, 10, 5); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(data)[i] = encode_small_float(v, 7, 8); break;
    case DataType::kInt8: static_cast<int8_t*>(data)[i] = static_cast<int8_t>(v); break;
    case DataType::kUInt8: static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(v); break;
    case DataType::kInt32: static_cast<int32_t*>(data)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(data)[i] = static_cast<int64_t>(v); break;
  }
}

/// Input element i of `rank`, chosen so that the exact result of `op` over up to 8 ranks is representable
/// in every type (so any reduction order gives the same bits), and so that misplaced elements show.
inline double input_value(int rank, size_t i, DataType type, ReduceOp op, uint32_t seed) {
  uint64_t h = (static_cast<uint64_t>(rank) * 0x9E3779B97F4A7C15ull) ^ (i * 0xBF58476D1CE4E5B9ull) ^ seed;
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  bool is_unsigned = type == DataType::kUInt8;
  switch (op) {
    case ReduceOp::kProd: {
      static const double kSigned[] = {1, 2, -1, 1, -2, 1};
      static const double kUnsigned[] = {1, 2, 1};
      return is_unsigned ? kUnsigned[h % 3] : kSigned[h % 6];
    }
    case ReduceOp::kMin:
    case ReduceOp::kMax: return is_unsigned ? static_cast<double>(h % 200) : static_cast<double>(h % 201) - 100;
    default: return is_unsigned ? static_cast<double>(h % 9) : static_cast<double>(h % 9) - 4;
  }
}

inline double combine(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kProd: return a * b;
    case ReduceOp::kMin: return std::min(a, b);
    case ReduceOp::kMax: return std::max(a, b);
    default: return a + b;
  }
}

/// The serial reference: element i of op over ranks 0..n-1, rounded into `type`, read back as double.
inline double reference_value(int n, size_t i, DataType type, ReduceOp op, uint32_t seed) {
  double acc = input_value(0, i, type, op, seed);
  for (int r = 1; r < n; ++r) acc = combine(op, acc, input_value(r, i, type, op, seed));
  if (op == ReduceOp::kAvg) acc /= n;
  uint8_t cell[8];
  put(type, cell, 0, acc);
  return get(type, cell, 0);
}

/// Tolerance for comparing a result with the reference: exact, except one rounding step for averages
/// of 16-bit floats (the library divides in fp32, then rounds once more).
inline double tolerance(DataType type, ReduceOp op, double expected) {
  if (op != ReduceOp::kAvg) return 0;
  double ulp = type == DataType::kFloat16    ? std::ldexp(1.0, -10)
               : type == DataType::kBFloat16 ? std::ldexp(1.0, -7)
                                             : 0;
  return std::fabs(expected) * ulp;
}

inline const std::vector<DataType>& all_types() {
  static const std::vector<DataType> types = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                                              DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
                                              DataType::kInt32,    DataType::kInt64};
  return types;
}
inline const std::vector<ReduceOp>& all_ops() {
  static const std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                                            ReduceOp::kAvg};
  return ops;
}

// The types and ops the collective matrices loop over (the multi-process worker, the in-process algorithm matrix):
// all of them, unless HIERCOLL_TEST_MATRIX says otherwise.
//   widths   (AddressSanitizer's run and the provider matrix: scripts/dev/sanitize, fabric_* in test/CMakeLists.txt):
//            one type per element width (the widths the pipelines' chunks and pieces round to, and so the bytes each
//            thread and each provider touches) and sum, max and avg (avg adds a pass after the reduction).
//   threads  (ThreadSanitizer's run): a 4-byte and a 2-byte type, sum and avg. What it looks for is in the threads'
//            hand-offs (queues, flags, the progress thread, the endpoint), which every type crosses alike, and each
//            pass under it costs several times ASan's.
// A type beyond those changes only which kernel reduces a range: the sanitizers check every kernel of every type,
// op, instruction set and alignment in the unit tests (reduce_test.cpp), and the release build runs every type and
// op through every collective over tcp (the mp tests). Either setting also runs each emulated layout once and a
// shorter soak (mp_tests.cpp).
inline std::string_view test_matrix() {
  static const std::string_view matrix = [] {
    const char* v = std::getenv("HIERCOLL_TEST_MATRIX");
    return std::string_view(v ? v : "");
  }();
  return matrix;
}
inline bool widths_only() { return test_matrix() == "widths" || test_matrix() == "threads"; }
inline const std::vector<DataType>& matrix_types() {
  static const std::vector<DataType> widths = {DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16,
                                               DataType::kInt8};
  static const std::vector<DataType> threads = {DataType::kFloat32, DataType::kBFloat16};
  if (test_matrix() == "threads") return threads;
  return widths_only() ? widths : all_types();
}
inline const std::vector<ReduceOp>& matrix_ops() {
  static const std::vector<ReduceOp> widths = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg};
  static const std::vector<ReduceOp> threads = {ReduceOp::kSum, ReduceOp::kAvg};
  if (test_matrix() == "threads") return threads;
  return widths_only() ? widths : all_ops();
}

}  // namespace hiercoll::test
