#pragma once
// A token's keys and values into the paged cache, after the rotary embedding: the work of
// rotary_kv_write_cuda, shared with the q, k and v projections that end in it (linear_parts_cuda).
#include "kernels/kernel_util.cuh"
#include "kernels/paged_attention.h"

namespace mosaic::kernels {

__device__ __forceinline__ std::int64_t cache_row(const PagedQueries& q, int token, int p) {
  const std::int32_t* blocks = q.blocks + q.block_offset[token];
  return static_cast<std::int64_t>(blocks[p / q.block_tokens]) * q.block_tokens + p % q.block_tokens;
}

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
