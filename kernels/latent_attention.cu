// DeepSeek's latent attention in the absorbed form (latent_attention.h). Sizes for DeepSeek-V2-Lite
// (16 heads, rank 512, rope 64, nope 128, v 128): a cache row is 1152 bytes, W_UK and W_UV 2 MiB
// each per layer, read once per launch from the L2 by every token.
#include "kernels/kernel_util.cuh"
#include "kernels/latent_attention.h"

namespace mosaic::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kHeadsPerBlock = kThreads / kWarp;  // the attention: a warp per head
constexpr int kTile = kWarp;                      // the attention: cache rows staged at a time, a lane each for the scores
constexpr int kWordsPerLane = (kMaxLatentRow / 2 + kWarp - 1) / kWarp;
// The projections' blocks take this many tokens each (a grid dimension of their own): a prompt's
// tokens spread over the GPU, each block's slice of W_UK or W_UV read once for its tokens.
constexpr int kProjectionTokens = 8;

// Pair i of the rotary part x [rope], turned by cos and sin rows of the token.
__device__ __forceinline__ void turn_pair(const float* x, const float* cos, const float* sin, const LatentShape& s, int i, float* out) {
  const int a = s.interleaved ? 2 * i : i, b = s.interleaved ? 2 * i + 1 : i + s.rope / 2;
  const float xa = x[a], xb = x[b];
  out[a] = xa * cos[i] - xb * sin[i];
  out[b] = xb * cos[i] + xa * sin[i];
}

__global__ void latent_kv_write_kernel(const float* __restrict__ kv, const std::uint16_t* __restrict__ norm, float eps,
                                       const float* __restrict__ cos, const float* __restrict__ sin, PagedQueries pq, LatentShape s,
                                       __nv_bfloat16* __restrict__ cache) {
  wait_for_previous_grid();
  __shared__ float shared32[32];
  __shared__ float row[kMaxLatentRow];  // the normalized latent, then the turned rotary key
  const int t = blockIdx.x;
  const float* x = kv + static_cast<std::int64_t>(t) * s.row();
  rms_norm_row(x, norm, s.rank, eps, row, shared32);
  for (int i = threadIdx.x; i < s.rope / 2; i += blockDim.x)
    turn_pair(x + s.rank, cos + static_cast<std::int64_t>(t) * s.rope, sin + static_cast<std::int64_t>(t) * s.rope, s, i, row + s.rank);
  __syncthreads();
  __nv_bfloat16* to = cache + cache_row(pq, t, pq.position[t]) * s.row();
  for (int i = threadIdx.x; i < s.row(); i += blockDim.x) to[i] = __float2bfloat16_rn(row[i]);
}

// Block (head, column chunk, token chunk): a thread per latent column c, the chunk's tokens in turn;
// W_UK's row d is read along c, coalesced. The column-chunk-0 blocks turn their tokens' rotary parts.
__global__ void latent_queries_kernel(const float* __restrict__ q, const std::uint16_t* __restrict__ kv_b, const float* __restrict__ cos,
                                      const float* __restrict__ sin, int tokens, LatentShape s, float* __restrict__ out) {
  wait_for_previous_grid();
  const int h = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x, in = s.nope + s.rope;
  const std::uint16_t* w = kv_b + static_cast<std::int64_t>(h) * (s.nope + s.v) * s.rank;
  const int first = blockIdx.z * kProjectionTokens, last = first + kProjectionTokens < tokens ? first + kProjectionTokens : tokens;
  for (int t = first; t < last; ++t) {
    const float* x = q + (static_cast<std::int64_t>(t) * s.heads + h) * in;
    float* y = out + (static_cast<std::int64_t>(t) * s.heads + h) * s.row();
    if (c < s.rank) {
      float acc = 0;
      for (int d = 0; d < s.nope; ++d) acc += x[d] * bf16_bits_to_float(w[static_cast<std::int64_t>(d) * s.rank + c]);
      y[c] = acc;
    }
    if (blockIdx.y == 0)
      for (int i = threadIdx.x; i < s.rope / 2; i += blockDim.x)
        turn_pair(x + s.nope, cos + static_cast<std::int64_t>(t) * s.rope, sin + static_cast<std::int64_t>(t) * s.rope, s, i, y + s.rank);
  }
}

// Block (token, 4 heads), a warp per head. Each tile of 32 cache rows is staged in shared memory once
// for the block's heads, rows kWords + 1 words apart when kWords is even so that lane r reading row
// r's word w hits bank (r + w) mod 32. Scores: lane r takes row r; the online softmax then adds the
// rows' latents into each lane's words lane, lane + 32, ….
__global__ void latent_attention_kernel(const float* __restrict__ q, PagedQueries pq, LatentShape s, float scale,
                                        const std::uint16_t* __restrict__ cache, float* __restrict__ out) {
  wait_for_previous_grid();
  extern __shared__ float shared[];
  const int W = s.row(), words = W / 2, stride = words | 1, rank_words = s.rank / 2;
  auto* tile = reinterpret_cast<unsigned*>(shared);                    // [kTile][stride]
  float* qs = shared + kTile * stride;                                  // [kHeadsPerBlock][W]
  const int t = blockIdx.x, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int h = blockIdx.y * kHeadsPerBlock + warp;
  const bool active = h < s.heads;
  float* qh = qs + warp * W;
  if (active)
    for (int d = lane; d < W; d += kWarp) qh[d] = q[(static_cast<std::int64_t>(t) * s.heads + h) * W + d];
  const int positions = pq.position[t] + 1;
  const auto* rows = reinterpret_cast<const unsigned*>(cache);
  float acc[2 * kWordsPerLane];
#pragma unroll
  for (int i = 0; i < 2 * kWordsPerLane; ++i) acc[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int base = 0; base < positions; base += kTile) {
    const int n = positions - base < kTile ? positions - base : kTile;
    __syncthreads();  // the tile before is read; the queries are staged
    for (int i = threadIdx.x; i < n * words; i += blockDim.x) {
      const int r = i / words, wd = i % words;
      tile[r * stride + wd] = rows[cache_row(pq, t, base + r) * words + wd];
    }
    __syncthreads();
    if (!active) continue;
    float score = -INFINITY;
    if (lane < n) {
      const unsigned* row = tile + lane * stride;
      float dot = 0;
      for (int wd = 0; wd < words; ++wd) {
        const unsigned u = row[wd];
        dot += qh[2 * wd] * __uint_as_float(u << 16) + qh[2 * wd + 1] * __uint_as_float(u & 0xffff0000u);
      }
      score = dot * scale;
    }
    const float m_new = fmaxf(m, warp_max(score));
    const float correction = expf(m - m_new);  // 0 on the first tile (m = −∞)
    const float p = lane < n ? expf(score - m_new) : 0.0f;
    l = l * correction + warp_sum(p);
    m = m_new;
#pragma unroll
    for (int i = 0; i < 2 * kWordsPerLane; ++i) acc[i] *= correction;
    for (int r = 0; r < n; ++r) {
      const float pr = __shfl_sync(0xffffffffu, p, r);
      const unsigned* row = tile + r * stride;
#pragma unroll
      for (int i = 0; i < kWordsPerLane; ++i) {
        const int wd = lane + i * kWarp;
        if (wd < rank_words) {
          const unsigned u = row[wd];
          acc[2 * i] += pr * __uint_as_float(u << 16);
          acc[2 * i + 1] += pr * __uint_as_float(u & 0xffff0000u);
        }
      }
    }
  }
  if (!active) return;
  float* o = out + (static_cast<std::int64_t>(t) * s.heads + h) * s.rank;
#pragma unroll
  for (int i = 0; i < kWordsPerLane; ++i) {
    const int wd = lane + i * kWarp;
    if (wd < rank_words) {
      o[2 * wd] = acc[2 * i] / l;
      o[2 * wd + 1] = acc[2 * i + 1] / l;
    }
  }
}

// A warp per output column (head h, value j): lanes along the latent, W_UV's row read coalesced as
// bf16 pairs; the block's token chunk (blockIdx.y) in turn.
__global__ void latent_values_kernel(const float* __restrict__ o, const std::uint16_t* __restrict__ kv_b, int tokens, LatentShape s,
                                     float* __restrict__ out) {
  wait_for_previous_grid();
  const int column = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (column >= s.heads * s.v) return;  // whole warps
  const int h = column / s.v, j = column % s.v, rank_words = s.rank / 2;
  const auto* w = reinterpret_cast<const unsigned*>(kv_b + (static_cast<std::int64_t>(h) * (s.nope + s.v) + s.nope + j) * s.rank);
  const int first = blockIdx.y * kProjectionTokens, last = first + kProjectionTokens < tokens ? first + kProjectionTokens : tokens;
  for (int t = first; t < last; ++t) {
    const float* x = o + (static_cast<std::int64_t>(t) * s.heads + h) * s.rank;
    float acc = 0;
    for (int wd = lane; wd < rank_words; wd += kWarp) {
      const unsigned u = w[wd];
      acc += x[2 * wd] * __uint_as_float(u << 16) + x[2 * wd + 1] * __uint_as_float(u & 0xffff0000u);
    }
    acc = warp_sum(acc);
    if (lane == 0) out[static_cast<std::int64_t>(t) * s.heads * s.v + column] = acc;
  }
}

std::size_t attention_shared_bytes(const LatentShape& s) {
  return (static_cast<std::size_t>(kTile) * ((s.row() / 2) | 1) + static_cast<std::size_t>(kHeadsPerBlock) * s.row()) * sizeof(float);
}

}  // namespace

int latent_kv_write_cuda(const float* kv, const bf16_t* norm, float eps, const float* cos, const float* sin, PagedQueries pq, int tokens,
                         LatentShape s, bf16_t* cache, void* stream) {
  if (!latent_shape_valid(s)) return static_cast<int>(cudaErrorInvalidValue);
  if (tokens == 0) return static_cast<int>(cudaSuccess);
  return launch_kernel(latent_kv_write_kernel, tokens, kThreads, 0, as_stream(stream), kv, norm, eps, cos, sin, pq, s,
                       reinterpret_cast<__nv_bfloat16*>(cache));
}

int latent_queries_cuda(const float* q, const bf16_t* kv_b, const float* cos, const float* sin, int tokens, LatentShape s, float* out,
                        void* stream) {
  if (!latent_shape_valid(s)) return static_cast<int>(cudaErrorInvalidValue);
  if (tokens == 0) return static_cast<int>(cudaSuccess);
  const dim3 grid(static_cast<unsigned>(s.heads), static_cast<unsigned>((s.rank + kThreads - 1) / kThreads),
                  static_cast<unsigned>((tokens + kProjectionTokens - 1) / kProjectionTokens));
  return launch_kernel(latent_queries_kernel, grid, kThreads, 0, as_stream(stream), q, kv_b, cos, sin, tokens, s, out);
}

int latent_attention_cuda(const float* q, PagedQueries pq, int tokens, LatentShape s, float scale, const bf16_t* cache, float* out,
                          void* stream) {
  if (!latent_shape_valid(s)) return static_cast<int>(cudaErrorInvalidValue);
  if (tokens == 0) return static_cast<int>(cudaSuccess);
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((s.heads + kHeadsPerBlock - 1) / kHeadsPerBlock));
  return launch_kernel(latent_attention_kernel, grid, kThreads, attention_shared_bytes(s), as_stream(stream), q, pq, s, scale, cache, out);
}

int latent_values_cuda(const float* o, const bf16_t* kv_b, int tokens, LatentShape s, float* out, void* stream) {
  if (!latent_shape_valid(s)) return static_cast<int>(cudaErrorInvalidValue);
  if (tokens == 0) return static_cast<int>(cudaSuccess);
  const int warps = kThreads / kWarp;
  const dim3 grid(static_cast<unsigned>((s.heads * s.v + warps - 1) / warps), static_cast<unsigned>((tokens + kProjectionTokens - 1) / kProjectionTokens));
  return launch_kernel(latent_values_kernel, grid, kThreads, 0, as_stream(stream), o, kv_b, tokens, s, out);
}

}  // namespace mosaic::kernels
