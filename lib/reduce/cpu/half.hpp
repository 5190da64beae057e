#pragma once
// Scalar fp16/bf16 <-> fp32 conversions, inline so each kernel translation unit can vectorise them
// with its own instruction set.
#include <cstdint>
#include <cstring>

namespace hiercoll::reduce::detail {

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_float(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

inline float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: the value is mantissa * 2^-24, exact in fp32.
    float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-08f;
    return float_of(bits_of(magnitude) | sign);
  }
  if (exponent == 31) return float_of(sign | 0x7f800000u | (mantissa << 13));
  return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline uint16_t float_to_half(float f) {
  uint32_t u = bits_of(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  uint32_t out;
  if (u >= 0x47800000u) {  // >= 65536: infinity, or NaN kept quiet
    out = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (u < 0x38800000u) {
    // Result is subnormal or zero: adding 0.5 shifts the mantissa so the FPU rounds it to 2^-24 steps.
    float shifted = float_of(u) + 0.5f;
    out = bits_of(shifted) - bits_of(0.5f);
  } else {
    uint32_t odd = (u >> 13) & 1u;
    u += 0xc8000fffu + odd;  // rebias exponent (-112 << 23, mod 2^32) and round to nearest even
    out = u >> 13;
  }
  return static_cast<uint16_t>(out | sign);
}

}  // namespace hiercoll::reduce::detail
