#include <algorithm>
#include <cfloat>
#include <cstddef>

#include "kernels/kv_rows.cuh"
#include "kernels/paged_attention.h"

namespace mosaic::kernels {
namespace {

__global__ void kv_write_kernel(const float* k, const float* v, PagedQueries q, int width, __nv_bfloat16* kc, __nv_bfloat16* vc) {
  wait_for_previous_grid();
  write_kv_row(k, v, q, blockIdx.x, width, kc, vc);
}

__global__ void rotary_kv_write_kernel(float* q, float* k, const float* v, const float* cos, const float* sin, PagedQueries pq,
                                       int heads, int kv_heads, int head_dim, __nv_bfloat16* kc, __nv_bfloat16* vc) {
  wait_for_previous_grid();
  rotary_kv_row(q, k, v, cos, sin, pq, blockIdx.x, heads, kv_heads, head_dim, kc, vc);
}

// One block per (query token, head) and part of its positions, its warps splitting those positions
// in both passes: scores into shared memory (a warp per position, lanes over head_dim), the softmax
// over the block, then each warp sums the values of its positions (lanes over head_dim, kDimsPerLane
// dims each) and the warps' partial sums are added in shared memory. A decode step has one block per
// head, so the sum over positions must not be serial: a thread per dimension walking every position
// made a 52-position step take 13 µs. Keys, then values, come through shared memory a stage of rows at
// a time, each thread's 16-byte loads issued together: read where they were used, a split block's 128
// positions took some 24 dependent trips to memory, and its time hardly moved from 512 positions to
// 2048 (19.5 → 20.6 µs on the H100, 2026-11-28; the bytes' floor 0.3 → 1.4 µs).
// With `skip_tiles`, a token whose tile the tiled kernel takes is left to it.
//
// Split (gridDim.z > 1, AttentionSplit): block z takes positions [z · chunk, (z + 1) · chunk) and,
// unless it is its token's only block, writes a record — its unnormalized sums, its score maximum and
// its sum of exponentials — to the scratch. The last block of a pair to finish (a counter per pair)
// rescales the records to their common maximum, adds them up and resets the counter. gridDim.z is at
// most kMaxSplits (attention_splits), the size of `factor`.
constexpr int kAttentionThreads = 256, kAttentionWarps = kAttentionThreads / kWarp, kDimsPerLane = 8;
constexpr int kPassDims = kWarp * kDimsPerLane;  // head dims summed per pass over the positions
constexpr int kStageBytes = 32 * 1024;          // the most a stage of key or value rows takes
constexpr int kMaxStageRows = 256;               // and the most rows
constexpr int kStageLoads = 8;                   // 16-byte loads a thread has in flight while staging

// Rows a stage holds: a block's positions, at most kStageBytes and kMaxStageRows of them.
__host__ __device__ constexpr int stage_rows(int head_dim, int positions) {
  int fit = kStageBytes / (2 * head_dim);
  fit = fit < kMaxStageRows ? fit : kMaxStageRows;
  return positions < fit ? positions : (fit > 0 ? fit : 1);
}

// A stage of `rows` rows in dynamic shared memory, rounded up to 16 bytes: the scores follow it.
__host__ __device__ constexpr std::size_t stage_bytes(int rows, int head_dim) {
  return (static_cast<std::size_t>(rows) * head_dim * 2 + 15) / 16 * 16;
}

// Positions [first, first + rows) of token t's sequence, kv head columns [col, col + head_dim) of
// `cache`, into `stage` [rows, head_dim]. The rows' cache rows are looked up first, a thread a row,
// into `row_of`, so that a piece's load waits on shared memory and not on the block table. Then
// 16-byte pieces where rows are whole pieces (head_dim a multiple of 8), each thread's kStageLoads
// loads issued before any is stored; else bf16 by bf16. Ends with the stage whole (a barrier).
__device__ __forceinline__ void stage_rows_of(const bf16_t* cache, const PagedQueries& pq, int t, int first, int rows, int width,
                                              int col, int head_dim, bf16_t* stage, std::int64_t* row_of) {
  for (int p = threadIdx.x; p < rows; p += blockDim.x) row_of[p] = cache_row(pq, t, first + p) * width + col;
  __syncthreads();
  if (head_dim % 8 == 0) {
    const int per_row = head_dim / 8, pieces = rows * per_row;
    for (int i0 = threadIdx.x; i0 < pieces; i0 += kStageLoads * blockDim.x) {
      uint4 v[kStageLoads];
#pragma unroll
      for (int u = 0; u < kStageLoads; ++u) {
        const int i = i0 + u * static_cast<int>(blockDim.x);
        if (i < pieces) v[u] = reinterpret_cast<const uint4*>(cache + row_of[i / per_row])[i % per_row];
      }
#pragma unroll
      for (int u = 0; u < kStageLoads; ++u) {
        const int i = i0 + u * static_cast<int>(blockDim.x);
        if (i < pieces) reinterpret_cast<uint4*>(stage)[i] = v[u];
      }
    }
  } else {
    for (int i = threadIdx.x; i < rows * head_dim; i += blockDim.x) stage[i] = cache[row_of[i / head_dim] + i % head_dim];
  }
  __syncthreads();
}

__host__ __device__ constexpr std::size_t split_record_floats(int head_dim) { return static_cast<std::size_t>(head_dim) + 2; }

// The positions [begin, end) that block z of `splits` takes of a token's `positions`, and how many of
// the blocks have any: at least kMinSplitPositions each when split, all of them in one block when not.
struct PositionRange {
  int begin, end, active;
};
__device__ __forceinline__ PositionRange split_range(int positions, int splits, int z) {
  int chunk = max((positions + splits - 1) / splits, 1);
  if (splits > 1 && chunk < kMinSplitPositions) chunk = kMinSplitPositions;
  const int begin = z * chunk;
  return {begin, min(begin + chunk, positions), (positions + chunk - 1) / chunk};
}

// Three blocks an SM: 80 registers, where the staging's loads in flight would take 94.
__global__ void __launch_bounds__(kAttentionThreads, 3)
    attention_kernel(const float* q, PagedQueries pq, int tokens, int heads, int kv_heads, int head_dim, const bf16_t* kc,
                     const bf16_t* vc, float* out, bool skip_tiles, unsigned* counters, float* records, int stage_capacity,
                     L2Prefetch next) {
  // A decode step's attention reads little and waits much: the memory is free for what comes next.
  // Weights no kernel of the step writes, so asked for before the wait, under the tail of the launch
  // before (with programmatic launches).
  prefetch_l2(next, blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z), gridDim.x * gridDim.y * gridDim.z);
  wait_for_previous_grid();
  // Dynamic: the stage [stage_capacity, head_dim] bf16, then the scores (16-byte aligned both).
  extern __shared__ uint4 dynamic[];
  bf16_t* stage = reinterpret_cast<bf16_t*>(dynamic);
  float* scores = reinterpret_cast<float*>(dynamic + stage_bytes(stage_capacity, head_dim) / sizeof(uint4));
  __shared__ float partial[32];
  __shared__ float sums[kAttentionWarps][kPassDims];
  __shared__ float factor[kMaxSplits];
  __shared__ std::int64_t row_of[kMaxStageRows];  // the stage's rows' offsets in the cache
  __shared__ bool last;
  const int t = blockIdx.x, h = blockIdx.y, kvh = h / (heads / kv_heads);
  if (skip_tiles && is_query_tile(pq.position, pq.block_offset, tokens, t / kTileQueries)) return;  // the whole block
  const PositionRange range = split_range(pq.position[t] + 1, static_cast<int>(gridDim.z), static_cast<int>(blockIdx.z));
  if (range.begin >= range.end) return;  // this token's context takes fewer blocks
  const int n = range.end - range.begin;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const float* qv = q + (static_cast<std::int64_t>(t) * heads + h) * head_dim;
  const float scale = rsqrtf(static_cast<float>(head_dim));
  const int width = kv_heads * head_dim, col = kvh * head_dim;
  const int capacity = min(stage_capacity, n);
  for (int s0 = 0; s0 < n; s0 += capacity) {
    const int rows = min(capacity, n - s0);
    stage_rows_of(kc, pq, t, range.begin + s0, rows, width, col, head_dim, stage, row_of);
    for (int p = warp; p < rows; p += kAttentionWarps) {
      const bf16_t* key = stage + static_cast<std::int64_t>(p) * head_dim;
      float s = 0.0f;
      for (int d = lane; d < head_dim; d += kWarp) s += qv[d] * bf16_bits_to_float(key[d]);
      s = warp_sum(s);
      if (lane == 0) scores[s0 + p] = s * scale;
    }
    __syncthreads();  // the stage read before the next is written (and, after the last, every score written)
  }
  float m = -FLT_MAX;
  for (int p = threadIdx.x; p < n; p += blockDim.x) m = fmaxf(m, scores[p]);
  m = warp_max(m);
  if (lane == 0) partial[warp] = m;
  __syncthreads();
  m = -FLT_MAX;
  for (int w = 0; w < kAttentionWarps; ++w) m = fmaxf(m, partial[w]);
  __syncthreads();
  float sum = 0;
  for (int p = threadIdx.x; p < n; p += blockDim.x) {
    const float e = __expf(scores[p] - m);
    scores[p] = e;
    sum += e;
  }
  sum = block_sum(sum, partial);  // synchronizes: every score is written
  const bool alone = range.active == 1;
  const std::int64_t pair = static_cast<std::int64_t>(t) * heads + h;
  const std::size_t record_floats = split_record_floats(head_dim);
  float* to = alone ? out + pair * head_dim : records + (pair * gridDim.z + blockIdx.z) * record_floats;
  const float inv = alone ? 1.0f / sum : 1.0f;
  for (int d0 = 0; d0 < head_dim; d0 += kPassDims) {  // past kPassDims dims (rare) the values are staged again
    float acc[kDimsPerLane];
#pragma unroll
    for (int j = 0; j < kDimsPerLane; ++j) acc[j] = 0.0f;
    for (int s0 = 0; s0 < n; s0 += capacity) {
      const int rows = min(capacity, n - s0);
      __syncthreads();  // the stage's last reader done
      stage_rows_of(vc, pq, t, range.begin + s0, rows, width, col, head_dim, stage, row_of);
#pragma unroll 2
      for (int p = warp; p < rows; p += kAttentionWarps) {
        const float w = scores[s0 + p];
        const bf16_t* value = stage + static_cast<std::int64_t>(p) * head_dim + d0;
#pragma unroll
        for (int j = 0; j < kDimsPerLane; ++j)
          if (d0 + lane + kWarp * j < head_dim) acc[j] += w * bf16_bits_to_float(value[lane + kWarp * j]);
      }
    }
#pragma unroll
    for (int j = 0; j < kDimsPerLane; ++j) sums[warp][lane + kWarp * j] = acc[j];
    __syncthreads();
    for (int d = threadIdx.x; d < kPassDims && d0 + d < head_dim; d += blockDim.x) {
      float total = 0;
#pragma unroll
      for (int w = 0; w < kAttentionWarps; ++w) total += sums[w][d];
      to[d0 + d] = total * inv;
    }
    __syncthreads();  // the next pass rewrites the sums
  }
  if (alone) return;

  // A part of a split pair: the record is complete; the pair's last block adds the parts up.
  if (threadIdx.x == 0) {
    to[head_dim] = m;
    to[head_dim + 1] = sum;
  }
  __threadfence();  // this block's record is visible to every block before its count is
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counters + pair, 1u) == static_cast<unsigned>(range.active - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  const float* parts = records + pair * gridDim.z * record_floats;  // read past L1 (__ldcg): other SMs wrote them
  if (warp == 0) {
    float most = -FLT_MAX;
    for (int z = lane; z < range.active; z += kWarp) most = fmaxf(most, __ldcg(parts + z * record_floats + head_dim));
    most = warp_max(most);
    float total = 0.0f;
    for (int z = lane; z < range.active; z += kWarp) {
      const float f = __expf(__ldcg(parts + z * record_floats + head_dim) - most);
      factor[z] = f;
      total += f * __ldcg(parts + z * record_floats + head_dim + 1);
    }
    total = warp_sum(total);
    if (lane == 0) partial[0] = 1.0f / total;
  }
  __syncthreads();
  const float inv_total = partial[0];
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int z = 0; z < range.active; ++z) acc += factor[z] * __ldcg(parts + z * record_floats + d);
    out[pair * head_dim + d] = acc * inv_total;
  }
  if (threadIdx.x == 0) counters[pair] = 0;  // ready for the next launch (a graph replays this one)
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
  wait_for_previous_grid();
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
  return launch_kernel(kv_write_kernel, tokens, 128, 0, as_stream(stream),
                       k, v, q, kv_heads * head_dim, reinterpret_cast<__nv_bfloat16*>(k_cache),
                       reinterpret_cast<__nv_bfloat16*>(v_cache));
}

int rotary_kv_write_cuda(float* q, float* k, const float* v, const float* cos, const float* sin, PagedQueries pq, int tokens,
                         int heads, int kv_heads, int head_dim, bf16_t* k_cache, bf16_t* v_cache, void* stream) {
  if (tokens == 0) return 0;
  return launch_kernel(rotary_kv_write_kernel, tokens, 256, 0, as_stream(stream), q, k, v, cos, sin, pq, heads, kv_heads, head_dim,
                       reinterpret_cast<__nv_bfloat16*>(k_cache), reinterpret_cast<__nv_bfloat16*>(v_cache));
}

namespace {

// Aim for two blocks per SM: one block of 256 threads per SM leaves too few loads in flight to keep
// the memory busy.
int split_target_blocks() {
  static const int target = [] {
    int device = 0, sms = 0;
    if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      cudaGetLastError();  // not left for the next launch's check to report
      return 0;
    }
    return 2 * sms;
  }();
  return target;
}

// The scratch: a counter for each pair that may split (fewer pairs than the target), then the records.
std::size_t split_counter_bytes() { return (static_cast<std::size_t>(split_target_blocks()) * sizeof(unsigned) + 255) / 256 * 256; }

}  // namespace

// Blocks per (token, head) pair: 1 unless there are fewer pairs than the target, the longest context
// has a second kMinSplitPositions, and the scratch holds the records.
int attention_splits(int tokens, int heads, int head_dim, int max_positions, AttentionSplit split) {
  const std::int64_t pairs = static_cast<std::int64_t>(tokens) * heads, target = split_target_blocks();
  if (!split.scratch || pairs >= target || split.bytes <= split_counter_bytes()) return 1;
  std::int64_t splits = std::min<std::int64_t>({(target + pairs - 1) / pairs, (max_positions + kMinSplitPositions - 1) / kMinSplitPositions,
                                                kMaxSplits});
  const std::size_t room = (split.bytes - split_counter_bytes()) / (sizeof(float) * split_record_floats(head_dim));
  splits = std::min<std::int64_t>(splits, static_cast<std::int64_t>(room) / pairs);
  return static_cast<int>(std::max<std::int64_t>(splits, 1));
}

std::size_t attention_split_bytes(int head_dim) {
  const int target = split_target_blocks();
  if (target == 0) return 0;
  // Fewer pairs than the target, each with at most ⌈target / pairs⌉ blocks: under twice the target records.
  return split_counter_bytes() + 2 * static_cast<std::size_t>(target) * split_record_floats(head_dim) * sizeof(float);
}

int paged_attention_cuda(const float* q, PagedQueries pq, int tokens, int heads, int kv_heads, int head_dim,
                         int max_positions, const bf16_t* k_cache, const bf16_t* v_cache, float* out, bool tiled,
                         void* stream, AttentionSplit split, const L2Prefetch& next, bool tensor_cores) {
  // Rounded up with a word to spare: the compiler may read the scores in 16-byte vectors. The
  // attributes are set on the first call, which may launch nothing (so that they are not made while
  // a stream is being captured into a graph).
  auto padded = [](int n) { return sizeof(float) * static_cast<std::size_t>((n + 4) / 4 * 4 + 4); };
  static const bool configured =
      cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(kStageBytes + 16 + padded(kMaxAttentionPositions))) == cudaSuccess &&
      cudaFuncSetAttribute(tiled_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(tiled_shared_bytes(kMaxTiledHeadDim))) == cudaSuccess &&
      split_target_blocks() >= 0;  // the SM count read here too, not under a capture
  if (!configured) return static_cast<int>(cudaErrorInvalidValue);
  if (tokens == 0) return 0;
  if (max_positions <= 0 || max_positions > kMaxAttentionPositions) return static_cast<int>(cudaErrorInvalidValue);
  // Tiles only where a tile can exist: a step of fewer tokens than a tile's least (every decode step)
  // launches the per-token kernel alone, as before.
  const bool tiles = tiled && head_dim <= kMaxTiledHeadDim && tokens >= kMinTileQueries;
  if (tiles && tensor_cores && tensor_core_tiles(head_dim, pq.block_tokens)) {
    if (const int e = tiled_attention_tc_cuda(q, pq, tokens, heads, kv_heads, head_dim, k_cache, v_cache, out, stream)) return e;
  } else if (tiles) {
    if (const int e = launch_kernel(tiled_attention_kernel, dim3(blocks_for(tokens, kTileQueries), heads), kTiledThreads,
                                    tiled_shared_bytes(head_dim), as_stream(stream), q, pq, tokens, heads, kv_heads, head_dim, k_cache,
                                    v_cache, out))
      return e;
  }
  const int splits = attention_splits(tokens, heads, head_dim, max_positions, split);
  // A block's scores: all of a token's positions, or its part of them (split_range's chunk at most).
  const int chunk = splits == 1 ? max_positions : std::max(kMinSplitPositions, (max_positions + splits - 1) / splits);
  auto* counters = static_cast<unsigned*>(split.scratch);
  auto* records = splits == 1 ? nullptr : reinterpret_cast<float*>(static_cast<std::byte*>(split.scratch) + split_counter_bytes());
  const int rows = stage_rows(head_dim, chunk);
  return launch_kernel(attention_kernel, dim3(tokens, heads, splits), kAttentionThreads, stage_bytes(rows, head_dim) + padded(chunk),
                       as_stream(stream), q, pq, tokens, heads, kv_heads, head_dim, k_cache, v_cache, out, tiles, counters, records, rows,
                       next);
}

}  // namespace mosaic::kernels
