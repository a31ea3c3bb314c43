#include <cfloat>

#include "kernels/kernel_util.cuh"
#include "kernels/paged_attention.h"

namespace mosaic::kernels {
namespace {

__device__ __forceinline__ std::int64_t cache_row(const PagedQueries& q, int token, int p) {
  const std::int32_t* blocks = q.blocks + q.block_offset[token];
  return static_cast<std::int64_t>(blocks[p / q.block_tokens]) * q.block_tokens + p % q.block_tokens;
}

__global__ void kv_write_kernel(const float* k, const float* v, PagedQueries q, int width, __nv_bfloat16* kc, __nv_bfloat16* vc) {
  const int t = blockIdx.x;
  const std::int64_t row = cache_row(q, t, q.position[t]);
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    kc[row * width + i] = __float2bfloat16_rn(k[static_cast<std::int64_t>(t) * width + i]);
    vc[row * width + i] = __float2bfloat16_rn(v[static_cast<std::int64_t>(t) * width + i]);
  }
}

// One block per (query token, head): scores of every visible position into shared memory (a warp
// per position, lanes over head_dim), softmax, then each thread sums one output dimension.
__global__ void attention_kernel(const float* q, PagedQueries pq, int heads, int kv_heads, int head_dim,
                                 const bf16_t* kc, const bf16_t* vc, float* out) {
  extern __shared__ float scores[];
  __shared__ float partial[32];
  const int t = blockIdx.x, h = blockIdx.y, kvh = h / (heads / kv_heads);
  const int positions = pq.position[t] + 1;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  const float* qv = q + (static_cast<std::int64_t>(t) * heads + h) * head_dim;
  const float scale = rsqrtf(static_cast<float>(head_dim));
  const int width = kv_heads * head_dim;
  for (int p = warp; p < positions; p += warps) {
    const bf16_t* key = kc + cache_row(pq, t, p) * width + kvh * head_dim;
    float s = 0;
    for (int d = lane; d < head_dim; d += kWarp) s += qv[d] * bf16_bits_to_float(key[d]);
    s = warp_sum(s);
    if (lane == 0) scores[p] = s * scale;
  }
  __syncthreads();
  float m = -FLT_MAX;
  for (int p = threadIdx.x; p < positions; p += blockDim.x) m = fmaxf(m, scores[p]);
  m = warp_max(m);
  if (lane == 0) partial[warp] = m;
  __syncthreads();
  m = -FLT_MAX;
  for (int w = 0; w < warps; ++w) m = fmaxf(m, partial[w]);
  __syncthreads();
  float sum = 0;
  for (int p = threadIdx.x; p < positions; p += blockDim.x) {
    const float e = __expf(scores[p] - m);
    scores[p] = e;
    sum += e;
  }
  sum = block_sum(sum, partial);  // synchronizes: every score is written
  const float inv = 1.0f / sum;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float acc = 0;
    for (int p = 0; p < positions; ++p) acc += scores[p] * bf16_bits_to_float(vc[cache_row(pq, t, p) * width + kvh * head_dim + d]);
    out[(static_cast<std::int64_t>(t) * heads + h) * head_dim + d] = acc * inv;
  }
}

}  // namespace

int kv_write_cuda(const float* k, const float* v, PagedQueries q, int tokens, int kv_heads, int head_dim, bf16_t* k_cache,
                  bf16_t* v_cache, void* stream) {
  if (tokens == 0) return 0;
  kv_write_kernel<<<tokens, 128, 0, as_stream(stream)>>>(k, v, q, kv_heads * head_dim, reinterpret_cast<__nv_bfloat16*>(k_cache),
                                                         reinterpret_cast<__nv_bfloat16*>(v_cache));
  return launched();
}

int paged_attention_cuda(const float* q, PagedQueries pq, int tokens, int heads, int kv_heads, int head_dim,
                         int max_positions, const bf16_t* k_cache, const bf16_t* v_cache, float* out, void* stream) {
  // Rounded up with a word to spare: the compiler may read the scores in 16-byte vectors. The
  // attribute is set on the first call, which may launch nothing (so that it is not made while a
  // stream is being captured into a graph).
  auto padded = [](int n) { return sizeof(float) * static_cast<std::size_t>((n + 4) / 4 * 4 + 4); };
  static const bool configured = cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                      static_cast<int>(padded(kMaxAttentionPositions))) == cudaSuccess;
  if (!configured) return static_cast<int>(cudaErrorInvalidValue);
  if (tokens == 0) return 0;
  if (max_positions <= 0 || max_positions > kMaxAttentionPositions) return static_cast<int>(cudaErrorInvalidValue);
  const std::size_t shared = padded(max_positions);
  attention_kernel<<<dim3(tokens, heads), 128, shared, as_stream(stream)>>>(q, pq, heads, kv_heads, head_dim, k_cache,
                                                                            v_cache, out);
  return launched();
}

}  // namespace mosaic::kernels
