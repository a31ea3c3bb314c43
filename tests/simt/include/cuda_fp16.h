#pragma once
// Stands in for cuda_fp16.h in simt builds: IEEE half as its 16 bits, converted exactly.
#include <cstdint>

#include "simt/simt.h"

struct __half {
  std::uint16_t bits;
};

inline __half __ushort_as_half(unsigned short v) { return {v}; }

inline float __half2float(__half h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
  const std::uint32_t exponent = (h.bits >> 10) & 0x1fu, mantissa = h.bits & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  const float subnormal = static_cast<float>(mantissa) * 0x1p-24f;  // exact: 10 bits times a power of two
  return sign ? -subnormal : subnormal;
}
