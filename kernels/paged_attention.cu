#include <cfloat>

#include "kernels/kernel_util.cuh"
#include "kernels/paged_attention.h"

namespace mosaic::kernels {
namespace {

__device__ __forceinline__ std::int64_t cache_row(const PagedQueries& q, int token, int p) {
  const std::int32_t* blocks = q.blocks + q.block_offset[token];
  return static_cast<std::int64_t>(blocks[p / q.block_tokens]) * q.block_tokens + p % q.block_tokens;
}

// Token t's k and v rows [width] into the cache row of its position, by the whole block.
__device__ __forceinline__ void write_kv_row(const float* k, const float* v, const PagedQueries& q, int t, int width,
                                             __nv_bfloat16* kc, __nv_bfloat16* vc) {
  const std::int64_t row = cache_row(q, t, q.position[t]);
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    kc[row * width + i] = __float2bfloat16_rn(k[static_cast<std::int64_t>(t) * width + i]);
    vc[row * width + i] = __float2bfloat16_rn(v[static_cast<std::int64_t>(t) * width + i]);
  }
}

__global__ void kv_write_kernel(const float* k, const float* v, PagedQueries q, int width, __nv_bfloat16* kc, __nv_bfloat16* vc) {
  write_kv_row(k, v, q, blockIdx.x, width, kc, vc);
}

__global__ void rotary_kv_write_kernel(float* q, float* k, const float* v, const float* cos, const float* sin, PagedQueries pq,
                                       int heads, int kv_heads, int head_dim, __nv_bfloat16* kc, __nv_bfloat16* vc) {
  const int t = blockIdx.x, half = head_dim / 2, width = kv_heads * head_dim;
  const float* c = cos + static_cast<std::int64_t>(t) * head_dim;
  const float* s = sin + static_cast<std::int64_t>(t) * head_dim;
  for (int i = threadIdx.x; i < heads * half; i += blockDim.x)
    rotate_pair(q + (static_cast<std::int64_t>(t) * heads + i / half) * head_dim, c, s, i % half, half);
  float* kt = k + static_cast<std::int64_t>(t) * width;
  for (int i = threadIdx.x; i < kv_heads * half; i += blockDim.x) rotate_pair(kt + (i / half) * head_dim, c, s, i % half, half);
  __syncthreads();  // every pair rotated (an odd head_dim's last element is not): then the rows as kv_write writes them
  write_kv_row(k, v, pq, t, width, kc, vc);
}

// One block per (query token, head), its warps splitting the visible positions in both passes:
// scores into shared memory (a warp per position, four positions at a time so that their loads are
// in flight together; lanes over head_dim), the softmax over the block, then each warp sums the
// values of its positions (lanes over head_dim, kDimsPerLane dims each) and the warps' partial sums
// are added in shared memory. A decode step has one block per head, so the sum over positions must
// not be serial: a thread per dimension walking every position made a 52-position step take 13 µs.
// With `skip_tiles`, a token whose tile the tiled kernel takes is left to it.
constexpr int kAttentionThreads = 256, kAttentionWarps = kAttentionThreads / kWarp, kDimsPerLane = 8;
constexpr int kPassDims = kWarp * kDimsPerLane;  // head dims summed per pass over the positions

__global__ void __launch_bounds__(kAttentionThreads) attention_kernel(const float* q, PagedQueries pq, int tokens, int heads,
                                                                     int kv_heads, int head_dim, const bf16_t* kc,
                                                                     const bf16_t* vc, float* out, bool skip_tiles) {
  extern __shared__ float scores[];
  __shared__ float partial[32];
  __shared__ float sums[kAttentionWarps][kPassDims];
  const int t = blockIdx.x, h = blockIdx.y, kvh = h / (heads / kv_heads);
  if (skip_tiles && is_query_tile(pq.position, pq.block_offset, tokens, t / kTileQueries)) return;  // the whole block
  const int positions = pq.position[t] + 1;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const float* qv = q + (static_cast<std::int64_t>(t) * heads + h) * head_dim;
  const float scale = rsqrtf(static_cast<float>(head_dim));
  const int width = kv_heads * head_dim;
  constexpr int kBatch = 4;
  for (int p0 = warp * kBatch; p0 < positions; p0 += kAttentionWarps * kBatch) {
    const bf16_t* key[kBatch];
    float s[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      key[i] = kc + cache_row(pq, t, min(p0 + i, positions - 1)) * width + kvh * head_dim;
      s[i] = 0.0f;
    }
    for (int d = lane; d < head_dim; d += kWarp) {
      const float qd = qv[d];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) s[i] += qd * bf16_bits_to_float(key[i][d]);
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      s[i] = warp_sum(s[i]);
      if (lane == 0 && p0 + i < positions) scores[p0 + i] = s[i] * scale;
    }
  }
  __syncthreads();
  float m = -FLT_MAX;
  for (int p = threadIdx.x; p < positions; p += blockDim.x) m = fmaxf(m, scores[p]);
  m = warp_max(m);
  if (lane == 0) partial[warp] = m;
  __syncthreads();
  m = -FLT_MAX;
  for (int w = 0; w < kAttentionWarps; ++w) m = fmaxf(m, partial[w]);
  __syncthreads();
  float sum = 0;
  for (int p = threadIdx.x; p < positions; p += blockDim.x) {
    const float e = __expf(scores[p] - m);
    scores[p] = e;
    sum += e;
  }
  sum = block_sum(sum, partial);  // synchronizes: every score is written
  const float inv = 1.0f / sum;
  for (int d0 = 0; d0 < head_dim; d0 += kPassDims) {
    float acc[kDimsPerLane];
#pragma unroll
    for (int j = 0; j < kDimsPerLane; ++j) acc[j] = 0.0f;
#pragma unroll 2
    for (int p = warp; p < positions; p += kAttentionWarps) {
      const float w = scores[p];
      const bf16_t* value = vc + cache_row(pq, t, p) * width + kvh * head_dim + d0;
#pragma unroll
      for (int j = 0; j < kDimsPerLane; ++j)
        if (d0 + lane + kWarp * j < head_dim) acc[j] += w * bf16_bits_to_float(value[lane + kWarp * j]);
    }
#pragma unroll
    for (int j = 0; j < kDimsPerLane; ++j) sums[warp][lane + kWarp * j] = acc[j];
    __syncthreads();
    for (int d = threadIdx.x; d < kPassDims && d0 + d < head_dim; d += blockDim.x) {
      float total = 0;
#pragma unroll
      for (int w = 0; w < kAttentionWarps; ++w) total += sums[w][d];
      out[(static_cast<std::int64_t>(t) * heads + h) * head_dim + d0 + d] = total * inv;
    }
    __syncthreads();  // the next pass rewrites the sums
  }
}

// The tiled kernel: one block of 128 threads per (query tile, head). Keys and values come in tiles of
// kKeyTile positions, converted to fp32 in shared memory once for the tile's 32 queries; the softmax
// is online (a running maximum and sum per query, the output rescaled as the maximum grows). Thread i
// owns query row i / 4: scores of keys i % 4 + 4j, and output dimensions i % 4 + 4j. Rows are padded
// by one float so that the four threads of a row, and the eight rows of a warp, fall in distinct banks.
constexpr int kKeyTile = 32, kTiledThreads = 128, kLanesPerRow = kTiledThreads / kTileQueries;
static_assert(kLanesPerRow == 4, "the shuffles below reduce over 4 lanes");

__host__ __device__ constexpr std::size_t tiled_shared_bytes(int head_dim) {
  return sizeof(float) * (static_cast<std::size_t>(kTileQueries + 2 * kKeyTile) * static_cast<std::size_t>(head_dim + 1) +
                          static_cast<std::size_t>(kTileQueries) * (kKeyTile + 1)) +
         sizeof(std::int64_t) * kKeyTile;
}

__device__ __forceinline__ float row_reduce_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float row_reduce_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

__global__ void __launch_bounds__(kTiledThreads) tiled_attention_kernel(const float* __restrict__ q, PagedQueries pq, int tokens,
                                                                        int heads, int kv_heads, int head_dim,
                                                                        const bf16_t* __restrict__ kc, const bf16_t* __restrict__ vc,
                                                                        float* __restrict__ out) {
  // The last tiles see the most keys: dispatched first, they do not leave a tail of long blocks.
  const int tile = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x), h = blockIdx.y, kvh = h / (heads / kv_heads);
  if (!is_query_tile(pq.position, pq.block_offset, tokens, tile)) return;  // the per-token kernel's
  extern __shared__ float shared[];
  const int stride = head_dim + 1, width = kv_heads * head_dim;
  float* qs = shared;                              // [kTileQueries][stride]
  float* ks = qs + kTileQueries * stride;          // [kKeyTile][stride]
  float* vs = ks + kKeyTile * stride;              // [kKeyTile][stride]
  float* ps = vs + kKeyTile * stride;              // [kTileQueries][kKeyTile + 1]
  auto* rows = reinterpret_cast<std::int64_t*>(ps + kTileQueries * (kKeyTile + 1));  // [kKeyTile]: cache rows

  const int first = tile * kTileQueries, n = min(kTileQueries, tokens - first);
  const int p0 = pq.position[first], last = p0 + n - 1;  // the tile's positions: p0 … last
  const std::int32_t* blocks = pq.blocks + pq.block_offset[first];
  const float scale = rsqrtf(static_cast<float>(head_dim));
  for (int i = threadIdx.x; i < kTileQueries * head_dim; i += kTiledThreads) {
    const int r = i / head_dim, d = i % head_dim;
    qs[r * stride + d] = r < n ? q[(static_cast<std::int64_t>(first + r) * heads + h) * head_dim + d] * scale : 0.0f;
  }

  const int r = threadIdx.x / kLanesPerRow, lane = threadIdx.x % kLanesPerRow;
  const bool active = r < n;
  const int position = p0 + r;
  constexpr int kDims = kMaxTiledHeadDim / kLanesPerRow, kKeys = kKeyTile / kLanesPerRow;
  float acc[kDims];
#pragma unroll
  for (int j = 0; j < kDims; ++j) acc[j] = 0.0f;
  float m = -FLT_MAX, l = 0.0f;

  for (int k0 = 0; k0 <= last; k0 += kKeyTile) {
    __syncthreads();  // the previous tile's keys and values are read; the queries are written
    if (threadIdx.x < kKeyTile) {
      const int p = k0 + threadIdx.x;
      rows[threadIdx.x] = p <= last ? static_cast<std::int64_t>(blocks[p / pq.block_tokens]) * pq.block_tokens + p % pq.block_tokens : -1;
    }
    __syncthreads();
    if (head_dim % 8 == 0) {  // 16-byte loads: rows start on 16 bytes when head_dim does (cudaMalloc'd caches)
      const int vectors = head_dim / 8;
      for (int i = threadIdx.x; i < kKeyTile * vectors; i += kTiledThreads) {
        const int c = i / vectors, d = (i % vectors) * 8;
        const std::int64_t row = rows[c];
        float kf[8] = {}, vf[8] = {};
        if (row >= 0) {
          const std::int64_t at = row * width + kvh * head_dim + d;
          unpack8(*reinterpret_cast<const uint4*>(kc + at), kf);
          unpack8(*reinterpret_cast<const uint4*>(vc + at), vf);
        }
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          ks[c * stride + d + e] = kf[e];
          vs[c * stride + d + e] = vf[e];
        }
      }
    } else {
      for (int i = threadIdx.x; i < kKeyTile * head_dim; i += kTiledThreads) {
        const int c = i / head_dim, d = i % head_dim;
        const std::int64_t row = rows[c];
        const std::int64_t at = row * width + kvh * head_dim + d;
        ks[c * stride + d] = row >= 0 ? bf16_bits_to_float(kc[at]) : 0.0f;
        vs[c * stride + d] = row >= 0 ? bf16_bits_to_float(vc[at]) : 0.0f;
      }
    }
    __syncthreads();

    // Scores of this row's keys lane + 4j; masked past the row's own position (causal).
    float s[kKeys];
#pragma unroll
    for (int j = 0; j < kKeys; ++j) s[j] = 0.0f;
    for (int d = 0; d < head_dim; ++d) {
      const float qd = qs[r * stride + d];
#pragma unroll
      for (int j = 0; j < kKeys; ++j) s[j] += qd * ks[(lane + kLanesPerRow * j) * stride + d];
    }
    float tile_max = -FLT_MAX;
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      if (!active || k0 + lane + kLanesPerRow * j > position) s[j] = -FLT_MAX;
      tile_max = fmaxf(tile_max, s[j]);
    }
    tile_max = row_reduce_max(tile_max);
    // Key 0 is in every row's first tile, so an active row's maximum is finite from then on.
    const float m_new = fmaxf(m, tile_max);
    const float rescale = __expf(m - m_new);
    float tile_sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      const float e = s[j] == -FLT_MAX ? 0.0f : __expf(s[j] - m_new);
      ps[r * (kKeyTile + 1) + lane + kLanesPerRow * j] = e;
      tile_sum += e;
    }
    l = l * rescale + row_reduce_sum(tile_sum);
    m = m_new;
    __syncwarp();  // the row's four lanes share a warp: their weights are written
#pragma unroll
    for (int j = 0; j < kDims; ++j) acc[j] *= rescale;
    for (int c = 0; c < kKeyTile; ++c) {
      const float w = ps[r * (kKeyTile + 1) + c];
#pragma unroll
      for (int j = 0; j < kDims; ++j)
        if (lane + kLanesPerRow * j < head_dim) acc[j] += w * vs[c * stride + lane + kLanesPerRow * j];
    }
  }
  if (!active) return;
  const float inv = 1.0f / l;
#pragma unroll
  for (int j = 0; j < kDims; ++j)
    if (lane + kLanesPerRow * j < head_dim) out[(static_cast<std::int64_t>(first + r) * heads + h) * head_dim + lane + kLanesPerRow * j] = acc[j] * inv;
}

}  // namespace

int kv_write_cuda(const float* k, const float* v, PagedQueries q, int tokens, int kv_heads, int head_dim, bf16_t* k_cache,
                  bf16_t* v_cache, void* stream) {
  if (tokens == 0) return 0;
  kv_write_kernel<<<tokens, 128, 0, as_stream(stream)>>>(k, v, q, kv_heads * head_dim, reinterpret_cast<__nv_bfloat16*>(k_cache),
                                                         reinterpret_cast<__nv_bfloat16*>(v_cache));
  return launched();
}

int rotary_kv_write_cuda(float* q, float* k, const float* v, const float* cos, const float* sin, PagedQueries pq, int tokens,
                         int heads, int kv_heads, int head_dim, bf16_t* k_cache, bf16_t* v_cache, void* stream) {
  if (tokens == 0) return 0;
  rotary_kv_write_kernel<<<tokens, 256, 0, as_stream(stream)>>>(q, k, v, cos, sin, pq, heads, kv_heads, head_dim,
                                                                reinterpret_cast<__nv_bfloat16*>(k_cache),
                                                                reinterpret_cast<__nv_bfloat16*>(v_cache));
  return launched();
}

int paged_attention_cuda(const float* q, PagedQueries pq, int tokens, int heads, int kv_heads, int head_dim,
                         int max_positions, const bf16_t* k_cache, const bf16_t* v_cache, float* out, bool tiled,
                         void* stream) {
  // Rounded up with a word to spare: the compiler may read the scores in 16-byte vectors. The
  // attributes are set on the first call, which may launch nothing (so that they are not made while
  // a stream is being captured into a graph).
  auto padded = [](int n) { return sizeof(float) * static_cast<std::size_t>((n + 4) / 4 * 4 + 4); };
  static const bool configured =
      cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(padded(kMaxAttentionPositions))) ==
          cudaSuccess &&
      cudaFuncSetAttribute(tiled_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(tiled_shared_bytes(kMaxTiledHeadDim))) == cudaSuccess;
  if (!configured) return static_cast<int>(cudaErrorInvalidValue);
  if (tokens == 0) return 0;
  if (max_positions <= 0 || max_positions > kMaxAttentionPositions) return static_cast<int>(cudaErrorInvalidValue);
  // Tiles only where a tile can exist: a step of fewer tokens than a tile's least (every decode step)
  // launches the per-token kernel alone, as before.
  const bool tiles = tiled && head_dim <= kMaxTiledHeadDim && tokens >= kMinTileQueries;
  if (tiles) {
    tiled_attention_kernel<<<dim3(blocks_for(tokens, kTileQueries), heads), kTiledThreads, tiled_shared_bytes(head_dim),
                             as_stream(stream)>>>(q, pq, tokens, heads, kv_heads, head_dim, k_cache, v_cache, out);
    if (const int e = launched()) return e;
  }
  attention_kernel<<<dim3(tokens, heads), kAttentionThreads, padded(max_positions), as_stream(stream)>>>(q, pq, tokens, heads, kv_heads, head_dim,
                                                                                         k_cache, v_cache, out, tiles);
  return launched();
}

}  // namespace mosaic::kernels
