#pragma once
// bf16 as the kernels' interfaces carry it (raw 16-bit words, so headers need no CUDA), and the
// host conversions the CPU references use: round to nearest even, as __float2bfloat16 does.
#include <cstdint>
#include <cstring>

namespace mosaic::kernels {

using bf16_t = std::uint16_t;

inline float bf16_to_float(bf16_t v) {
  const std::uint32_t bits = static_cast<std::uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline bf16_t float_to_bf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) return static_cast<bf16_t>((bits >> 16) | 0x40);  // NaN stays NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<bf16_t>(bits >> 16);
}

}  // namespace mosaic::kernels
