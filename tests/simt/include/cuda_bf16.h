#pragma once
// Stands in for cuda_bf16.h in simt builds: bf16 as its 16 bits, rounded to nearest even as the
// device rounds.
#include <cstdint>

#include "cuda_fp16.h"
#include "simt/simt.h"

struct __nv_bfloat16 {
  std::uint16_t bits;
};

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  std::uint32_t b = std::bit_cast<std::uint32_t>(f);
  if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu)) return {static_cast<std::uint16_t>((b >> 16) | 0x40u)};  // quiet NaN
  b += 0x7fffu + ((b >> 16) & 1u);
  return {static_cast<std::uint16_t>(b >> 16)};
}

inline float __bfloat162float(__nv_bfloat16 h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h.bits) << 16); }
