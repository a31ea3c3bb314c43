#pragma once
// The inner loop every memory-bound product here shares: one warp takes the dot products of one bf16
// weight row with up to TOK fp32 activation rows. Lanes read the weight row in 16-byte pieces
// (eight bf16 each) when `in` is a multiple of 8, else one element at a time.
#include "kernels/kernel_util.cuh"
#include "kernels/linear.h"

namespace mosaic::kernels {

// dot_rows, and with Normed dot_rows_normed (below): one loop, the norm's work compiled in or out.
template <int TOK, bool Normed>
__device__ __forceinline__ void dot_rows_impl(const std::uint16_t* __restrict__ w_row, int in, const float* const* __restrict__ xs,
                                              int count, const std::uint16_t* __restrict__ g, float eps, float (&acc)[TOK]) {
  const int lane = threadIdx.x % kWarp;
  float ss[TOK];  // Normed: each row's sum of squares
#pragma unroll
  for (int t = 0; t < TOK; ++t) acc[t] = ss[t] = 0.0f;
  if (in % 8 == 0) {
    const uint4* w4 = reinterpret_cast<const uint4*>(w_row);
#pragma unroll 4
    for (int i = lane; i < in / 8; i += kWarp) {
      float w[8];
      unpack8(__ldg(w4 + i), w);
      if constexpr (Normed) {
        float s[8];
        unpack8(__ldg(reinterpret_cast<const uint4*>(g) + i), s);
#pragma unroll
        for (int j = 0; j < 8; ++j) w[j] *= s[j];
      }
#pragma unroll
      for (int t = 0; t < TOK; ++t) {
        if (t >= count) break;
        const float4 a = reinterpret_cast<const float4*>(xs[t])[2 * i];
        const float4 b = reinterpret_cast<const float4*>(xs[t])[2 * i + 1];
        acc[t] += w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w + w[4] * b.x + w[5] * b.y + w[6] * b.z + w[7] * b.w;
        if constexpr (Normed)
          ss[t] += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w + b.x * b.x + b.y * b.y + b.z * b.z + b.w * b.w;
      }
    }
  } else {
    for (int i = lane; i < in; i += kWarp) {
      float w = bf16_bits_to_float(w_row[i]);
      if constexpr (Normed) w *= bf16_bits_to_float(g[i]);
#pragma unroll
      for (int t = 0; t < TOK; ++t) {
        if (t >= count) break;
        const float v = xs[t][i];
        acc[t] += w * v;
        if constexpr (Normed) ss[t] += v * v;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < TOK; ++t)
    if (t < count) {  // count is the warp's own: only rows it has are reduced
      acc[t] = warp_sum(acc[t]);
      if constexpr (Normed) acc[t] *= rsqrtf(warp_sum(ss[t]) / static_cast<float>(in) + eps);
    }
}

template <int TOK>
__device__ __forceinline__ void dot_rows(const std::uint16_t* __restrict__ w_row, int in, const float* const* __restrict__ xs, int count,
                                         float (&acc)[TOK]) {
  dot_rows_impl<TOK, false>(w_row, in, xs, count, nullptr, 0.0f, acc);
}

// Two weight rows in one pass, each against its own activation rows (SwiGLU's gate and up against
// the same; two pairs' down rows against their own): both rows' loads are in flight together, so a
// warp waits on memory half as many times as with two dot_rows. The sums are dot_rows' own.
template <int TOK>
__device__ __forceinline__ void dot_row_pair(const std::uint16_t* __restrict__ a_row, const float* const* __restrict__ a_xs,
                                             const std::uint16_t* __restrict__ b_row, const float* const* __restrict__ b_xs, int in,
                                             int count, float (&a_acc)[TOK], float (&b_acc)[TOK]) {
  if (in % 8 != 0) {
    dot_rows<TOK>(a_row, in, a_xs, count, a_acc);
    dot_rows<TOK>(b_row, in, b_xs, count, b_acc);
    return;
  }
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int t = 0; t < TOK; ++t) a_acc[t] = b_acc[t] = 0.0f;
  const uint4* a4 = reinterpret_cast<const uint4*>(a_row);
  const uint4* b4 = reinterpret_cast<const uint4*>(b_row);
#pragma unroll 4
  for (int i = lane; i < in / 8; i += kWarp) {
    float a[8], b[8];
    unpack8(__ldg(a4 + i), a);
    unpack8(__ldg(b4 + i), b);
#pragma unroll
    for (int t = 0; t < TOK; ++t) {
      if (t >= count) break;
      const float4 u = reinterpret_cast<const float4*>(a_xs[t])[2 * i];
      const float4 v = reinterpret_cast<const float4*>(a_xs[t])[2 * i + 1];
      a_acc[t] += a[0] * u.x + a[1] * u.y + a[2] * u.z + a[3] * u.w + a[4] * v.x + a[5] * v.y + a[6] * v.z + a[7] * v.w;
      const float4 y = reinterpret_cast<const float4*>(b_xs[t])[2 * i];
      const float4 z = reinterpret_cast<const float4*>(b_xs[t])[2 * i + 1];
      b_acc[t] += b[0] * y.x + b[1] * y.y + b[2] * y.z + b[3] * y.w + b[4] * z.x + b[5] * z.y + b[6] * z.z + b[7] * z.w;
    }
  }
#pragma unroll
  for (int t = 0; t < TOK; ++t)
    if (t < count) {
      a_acc[t] = warp_sum(a_acc[t]);
      b_acc[t] = warp_sum(b_acc[t]);
    }
}

// dot_rows against RMS-normalized rows of x: acc[t] = (g ∘ x_t / rms(x_t)) · w_row, with
// rms(x) = sqrt(mean(x²) + eps) and g the norm's weight (bf16, `in` of them). The warp reads all of
// x_t for the product anyway, so it sums x_t² as it goes: a decode step's input RMSNorm costs its
// q, k and v projections no launch, no barrier and no pass of its own.
template <int TOK>
__device__ __forceinline__ void dot_rows_normed(const std::uint16_t* __restrict__ w_row, int in, const float* const* __restrict__ xs,
                                                int count, const std::uint16_t* __restrict__ g, float eps, float (&acc)[TOK]) {
  dot_rows_impl<TOK, true>(w_row, in, xs, count, g, eps, acc);
}

// Rows of x taken TOK at a time, and how many of them there are.
template <int TOK>
__device__ __forceinline__ int row_pointers(const float* x, int in, int first, int n, const float* (&xs)[TOK]) {
  const int count = min(TOK, n - first);
#pragma unroll
  for (int t = 0; t < TOK; ++t) xs[t] = x + static_cast<std::int64_t>(first + (t < count ? t : 0)) * in;
  return count;
}

constexpr int kRowsPerBlock = 8;  // warps per block: one weight row each

// Weight row `row` against rows [first, first + TOK) of x, by one warp.
// Normed: against x's rows RMS-normalized by `norm` (dot_rows_normed). A template parameter, so that
// the plain kernels keep their registers (linear_parts_kernel<8>: 64, where 68 would round to 72).
template <int TOK, bool Normed = false>
__device__ __forceinline__ void linear_row(const float* __restrict__ x, int n, int in, const bf16_t* __restrict__ w, int out, int row,
                                           int first, const bf16_t* __restrict__ bias, bool accumulate, float* __restrict__ y,
                                           RowNorm norm = {}) {
  const float* xs[TOK];
  const int count = row_pointers<TOK>(x, in, first, n, xs);
  float acc[TOK];
  if constexpr (Normed) dot_rows_normed<TOK>(w + static_cast<std::int64_t>(row) * in, in, xs, count, norm.weight, norm.eps, acc);
  else dot_rows<TOK>(w + static_cast<std::int64_t>(row) * in, in, xs, count, acc);
  if (threadIdx.x % kWarp != 0) return;
  const float b = bias ? bf16_bits_to_float(bias[row]) : 0.0f;
#pragma unroll
  for (int t = 0; t < TOK; ++t) {
    if (t >= count) break;
    float& dst = y[static_cast<std::int64_t>(first + t) * out + row];
    dst = (accumulate ? dst : 0.0f) + acc[t] + b;
  }
}

}  // namespace mosaic::kernels
