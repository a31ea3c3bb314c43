#pragma once
// The inner loop every memory-bound product here shares: one warp takes the dot products of one bf16
// weight row with up to TOK fp32 activation rows. Lanes read the weight row in 16-byte pieces
// (eight bf16 each) when `in` is a multiple of 8, else one element at a time.
#include "kernels/kernel_util.cuh"

namespace mosaic::kernels {

template <int TOK>
__device__ __forceinline__ void dot_rows(const std::uint16_t* __restrict__ w_row, int in,
                                         const float* const* __restrict__ xs, int count, float (&acc)[TOK]) {
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int t = 0; t < TOK; ++t) acc[t] = 0.0f;
  if (in % 8 == 0) {
    const uint4* w4 = reinterpret_cast<const uint4*>(w_row);
#pragma unroll 4
    for (int i = lane; i < in / 8; i += kWarp) {
      float w[8];
      unpack8(__ldg(w4 + i), w);
#pragma unroll
      for (int t = 0; t < TOK; ++t) {
        if (t >= count) break;
        const float4 a = reinterpret_cast<const float4*>(xs[t])[2 * i];
        const float4 b = reinterpret_cast<const float4*>(xs[t])[2 * i + 1];
        acc[t] += w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w + w[4] * b.x + w[5] * b.y + w[6] * b.z + w[7] * b.w;
      }
    }
  } else {
    for (int i = lane; i < in; i += kWarp) {
      const float w = bf16_bits_to_float(w_row[i]);
#pragma unroll
      for (int t = 0; t < TOK; ++t) {
        if (t >= count) break;
        acc[t] += w * xs[t][i];
      }
    }
  }
#pragma unroll
  for (int t = 0; t < TOK; ++t) acc[t] = warp_sum(acc[t]);
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

}  // namespace mosaic::kernels
