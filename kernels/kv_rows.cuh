#pragma once
// A token's keys and values into the paged cache, after the rotary embedding: the work of
// rotary_kv_write_cuda, shared with the q, k and v projections that end in it (linear_parts_cuda).
#include "kernels/kernel_util.cuh"
#include "kernels/linear.h"
#include "kernels/paged_attention.h"

namespace mosaic::kernels {

// Token t's k and v rows [width] into the cache row of its position, by the whole block; read past
// L1, as rotate_pair reads.
__device__ __forceinline__ void write_kv_row(const float* k, const float* v, const PagedQueries& q, int t, int width,
                                             __nv_bfloat16* kc, __nv_bfloat16* vc) {
  const std::int64_t row = cache_row(q, t, q.position[t]);
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    kc[row * width + i] = __float2bfloat16_rn(__ldcg(k + static_cast<std::int64_t>(t) * width + i));
    vc[row * width + i] = __float2bfloat16_rn(__ldcg(v + static_cast<std::int64_t>(t) * width + i));
  }
}

// Token t's q, k and v as QkPrepare (linear.h) says, in place, by the whole block: the whole-row
// norms, the clamp, the per-head norms, each finished before the next begins. shared32: 32 floats.
__device__ __forceinline__ void prepare_qkv_row(float* q, float* k, float* v, const QkPrepare& p, int t, int heads, int kv_heads, int head_dim,
                                                float* shared32) {
  const int qw = heads * head_dim, kw = kv_heads * head_dim;
  float* qt = q + static_cast<std::int64_t>(t) * qw;
  float* kt = k + static_cast<std::int64_t>(t) * kw;
  float* vt = v + static_cast<std::int64_t>(t) * kw;
  if (p.q_norm && !p.per_head) {
    rms_norm_row(qt, p.q_norm, qw, p.eps, qt, shared32);
    rms_norm_row(kt, p.k_norm, kw, p.eps, kt, shared32);
    __syncthreads();
  }
  if (p.clip > 0) {
    for (int i = threadIdx.x; i < qw; i += blockDim.x) qt[i] = fminf(fmaxf(__ldcg(qt + i), -p.clip), p.clip);
    for (int i = threadIdx.x; i < kw; i += blockDim.x) {
      kt[i] = fminf(fmaxf(__ldcg(kt + i), -p.clip), p.clip);
      vt[i] = fminf(fmaxf(__ldcg(vt + i), -p.clip), p.clip);
    }
    __syncthreads();
  }
  if (p.q_norm && p.per_head) {  // a warp a head: q's heads, then k's
    const int lane = threadIdx.x % kWarp;
    for (int h = threadIdx.x / kWarp; h < heads + kv_heads; h += blockDim.x / kWarp) {
      float* row = h < heads ? qt + h * head_dim : kt + (h - heads) * head_dim;
      const std::uint16_t* w = h < heads ? p.q_norm : p.k_norm;
      float ss = 0;
      for (int d = lane; d < head_dim; d += kWarp) {
        const float x = __ldcg(row + d);
        ss += x * x;
      }
      const float scale = rsqrtf(warp_sum(ss) / static_cast<float>(head_dim) + p.eps);
      for (int d = lane; d < head_dim; d += kWarp) row[d] = bf16_bits_to_float(w[d]) * (__ldcg(row + d) * scale);
    }
    __syncthreads();
  }
}

// Token t's q and k rotated in place (cos and sin rows [tokens, head_dim]), then its k and v rows
// written to the cache, by the whole block.
__device__ __forceinline__ void rotary_kv_row(float* q, float* k, const float* v, const float* cos, const float* sin, const PagedQueries& pq,
                                              int t, int heads, int kv_heads, int head_dim, __nv_bfloat16* kc, __nv_bfloat16* vc) {
  const int half = head_dim / 2, width = kv_heads * head_dim;
  const float* c = cos + static_cast<std::int64_t>(t) * head_dim;
  const float* s = sin + static_cast<std::int64_t>(t) * head_dim;
  for (int i = threadIdx.x; i < heads * half; i += blockDim.x)
    rotate_pair(q + (static_cast<std::int64_t>(t) * heads + i / half) * head_dim, c, s, i % half, half);
  float* kt = k + static_cast<std::int64_t>(t) * width;
  for (int i = threadIdx.x; i < kv_heads * half; i += blockDim.x) rotate_pair(kt + (i / half) * head_dim, c, s, i % half, half);
  __syncthreads();  // every pair rotated (an odd head_dim's last element is not): then the rows as kv_write writes them
  write_kv_row(k, v, pq, t, width, kc, vc);
}

}  // namespace mosaic::kernels
