#include "model/dtype_convert.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "common/simd_clones.h"

namespace mosaic {
namespace {

float bf16_to_float(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant · 2^-24
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf / nan
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

template <class T, class F>
void convert(const std::byte* in, std::span<float> out, F f) {
  for (std::size_t i = 0; i < out.size(); ++i) {
    T v;
    std::memcpy(&v, in + i * sizeof(T), sizeof(T));  // mapped data may be unaligned
    out[i] = f(v);
  }
}

template <class T, class F>
void convert_back(std::span<const float> in, std::byte* out, F f) {
  for (std::size_t i = 0; i < in.size(); ++i) {
    const T v = f(in[i]);
    std::memcpy(out + i * sizeof(T), &v, sizeof(T));
  }
}

// The hot case when streaming checkpoints: vectorized for AVX2 when the CPU has it.
MOSAIC_SIMD_CLONES
void bf16_to_float_n(const std::byte* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    out[i] = bf16_to_float(h);
  }
}

// Elements whose exponent bits are all ones (NaN or infinity), found a block at a time: the block
// test counts matches without branching, which vectorizes (a `bool |=` reduction does not, and runs
// at a third of the speed); only a block with a match is scanned for its index.
template <class Bits>
std::optional<std::size_t> first_all_ones(std::span<const std::byte> bytes, Bits exponent) {
  const std::size_t n = bytes.size() / sizeof(Bits);
  constexpr std::size_t kBlock = 4096;
  auto at = [&](std::size_t i) {
    Bits x;
    std::memcpy(&x, bytes.data() + i * sizeof(Bits), sizeof(Bits));  // mapped data may be unaligned
    return x;
  };
  for (std::size_t start = 0; start < n; start += kBlock) {
    const std::size_t end = std::min(n, start + kBlock);
    unsigned matches = 0;
    for (std::size_t i = start; i < end; ++i) matches += (at(i) & exponent) == exponent;
    if (matches == 0) continue;
    for (std::size_t i = start; i < end; ++i)
      if ((at(i) & exponent) == exponent) return i;
  }
  return std::nullopt;
}

}  // namespace

void to_float(DType dtype, const std::byte* in, std::span<float> out) {
  switch (dtype) {
    case DType::BF16: return bf16_to_float_n(in, out.data(), out.size());
    case DType::F16: return convert<std::uint16_t>(in, out, f16_to_float);
    case DType::F32: std::memcpy(out.data(), in, out.size_bytes()); return;
    case DType::F64: return convert<double>(in, out, [](double d) { return static_cast<float>(d); });
    default: return;  // callers pass weights, which Checkpoint admits only as floating point
  }
}

void from_float(DType dtype, std::span<const float> in, std::byte* out) {
  switch (dtype) {
    case DType::BF16: return convert_back<std::uint16_t>(in, out, float_to_bf16);
    case DType::F16: return convert_back<std::uint16_t>(in, out, float_to_f16);
    case DType::F32: std::memcpy(out, in.data(), in.size_bytes()); return;
    case DType::F64: return convert_back<double>(in, out, [](float f) { return static_cast<double>(f); });
    default: return;
  }
}

std::optional<std::size_t> first_non_finite(DType dtype, std::span<const std::byte> bytes) {
  switch (dtype) {
    case DType::BF16: return first_all_ones<std::uint16_t>(bytes, 0x7f80u);
    case DType::F16: return first_all_ones<std::uint16_t>(bytes, 0x7c00u);
    case DType::F32: return first_all_ones<std::uint32_t>(bytes, 0x7f800000u);
    case DType::F64: return first_all_ones<std::uint64_t>(bytes, 0x7ff0000000000000u);
    default: return std::nullopt;
  }
}

std::uint16_t float_to_bf16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

std::uint16_t float_to_f16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const int exp = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
  const std::uint32_t mant = u & 0x7fffffu;
  if (exp <= 0) return static_cast<std::uint16_t>(sign);
  if (exp >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);
  std::uint32_t h = sign | (static_cast<std::uint32_t>(exp) << 10) | (mant >> 13);
  if ((mant & 0x1fffu) > 0x1000u || ((mant & 0x1fffu) == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(h);
}

}  // namespace mosaic
