// Prompt attention on tensor cores (paged_attention.h): a query tile's scores and its weighted values
// as wmma bf16 16×16×16 products with fp32 accumulation, the softmax online in fp32 between them.
#include <mma.h>

#include <cfloat>

#include "kernels/kernel_util.cuh"
#include "kernels/paged_attention.h"

namespace mosaic::kernels {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kTile = 16;
constexpr int kRowWarps = kTileQueries / kTile;  // a warp per 16 query rows of the tile
constexpr int kLd = kMaxTiledHeadDim + kTile;     // staged rows: 32-byte aligned tiles

// What a warp keeps between key tiles: its rows' output so far, and the tiles it passes through
// shared memory (the fragments' layout is the GPU's own, so rescaling goes through memory).
struct WarpState {
  float out[kTile][kMaxTiledHeadDim];
  alignas(32) float scores[kTile * kTile];
  alignas(32) float product[kTile * kTile];
  alignas(32) __nv_bfloat16 p[kTile * kTile];
  alignas(32) __nv_bfloat16 v[kTile][kLd];
  float rescale[kTile], sum[kTile];
};

// One block of kRowWarps warps per (query tile, head), tiles as is_query_tile takes them. Keys come
// straight from the cache in tiles of 16 positions (one block's run of rows: block_tokens is a
// multiple of 16); values are staged, zero past the warp's last position, where the cache may hold
// anything. Scores past a row's own position are masked (causal).
__global__ void __launch_bounds__(kRowWarps * kWarp)
    tiled_attention_tc_kernel(const float* __restrict__ q, PagedQueries pq, int tokens, int heads, int kv_heads, int head_dim,
                              const bf16_t* __restrict__ kc, const bf16_t* __restrict__ vc, float* __restrict__ out) {
  wait_for_previous_grid();
  const int tile = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x), h = blockIdx.y, kvh = h / (heads / kv_heads);
  if (!is_query_tile(pq.position, pq.block_offset, tokens, tile)) return;  // the per-token kernel's
  alignas(32) __shared__ __nv_bfloat16 qs[kTileQueries][kLd];
  alignas(32) __shared__ WarpState warps[kRowWarps];
  const int first = tile * kTileQueries, n = min(kTileQueries, tokens - first);
  const int p0 = pq.position[first], width = kv_heads * head_dim;
  const std::int32_t* blocks = pq.blocks + pq.block_offset[first];
  const float scale = rsqrtf(static_cast<float>(head_dim));
  for (int i = threadIdx.x; i < kTileQueries * head_dim; i += blockDim.x) {
    const int r = i / head_dim, d = i % head_dim;
    qs[r][d] = __float2bfloat16_rn(r < n ? q[(static_cast<std::int64_t>(first + r) * heads + h) * head_dim + d] * scale : 0.0f);
  }
  __syncthreads();
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, row0 = warp * kTile;
  if (row0 >= n) return;  // no __syncthreads below
  WarpState& w = warps[warp];
  const int rows = min(kTile, n - row0), last = p0 + row0 + rows - 1;  // the warp's last position
  for (int i = lane; i < kTile * head_dim; i += kWarp) w.out[i / head_dim][i % head_dim] = 0.0f;
  float m = -FLT_MAX, l = 0.0f;  // lane r < 16: row r's running maximum and sum
  const bool row_lane = lane < kTile && lane < rows;
  const int position = p0 + row0 + lane;

  for (int k0 = 0; k0 <= last; k0 += kTile) {
    const std::int64_t row_of_k0 = static_cast<std::int64_t>(blocks[k0 / pq.block_tokens]) * pq.block_tokens + k0 % pq.block_tokens;
    const bf16_t* keys = kc + row_of_k0 * width + kvh * head_dim;
    wmma::fragment<wmma::accumulator, kTile, kTile, kTile, float> s;
    wmma::fill_fragment(s, 0.0f);
    for (int d = 0; d < head_dim; d += kTile) {
      wmma::fragment<wmma::matrix_a, kTile, kTile, kTile, __nv_bfloat16, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, kTile, kTile, kTile, __nv_bfloat16, wmma::col_major> b;
      wmma::load_matrix_sync(a, &qs[row0][d], kLd);
      wmma::load_matrix_sync(b, reinterpret_cast<const __nv_bfloat16*>(keys + d), width);
      wmma::mma_sync(s, a, b, s);
    }
    wmma::store_matrix_sync(w.scores, s, kTile, wmma::mem_row_major);
    const auto* values = reinterpret_cast<const __nv_bfloat16*>(vc) + row_of_k0 * width + kvh * head_dim;
    for (int i = lane; i < kTile * head_dim; i += kWarp) {  // the values, zero past the warp's last position
      const int c = i / head_dim, d = i % head_dim;
      w.v[c][d] = k0 + c <= last ? values[static_cast<std::int64_t>(c) * width + d] : __float2bfloat16_rn(0.0f);
    }
    __syncwarp();
    if (lane < kTile) {
      float tile_max = -FLT_MAX;
      for (int c = 0; c < kTile; ++c)
        if (row_lane && k0 + c <= position) tile_max = fmaxf(tile_max, w.scores[lane * kTile + c]);
      const float m_new = fmaxf(m, tile_max), rescale = __expf(m - m_new);
      float tile_sum = 0.0f;
      for (int c = 0; c < kTile; ++c) {
        const bool seen = row_lane && k0 + c <= position;
        const __nv_bfloat16 e = __float2bfloat16_rn(seen ? __expf(w.scores[lane * kTile + c] - m_new) : 0.0f);
        w.p[lane * kTile + c] = e;
        tile_sum += __bfloat162float(e);
      }
      l = l * rescale + tile_sum;
      m = m_new;
      w.rescale[lane] = rescale;
    }
    __syncwarp();
    wmma::fragment<wmma::matrix_a, kTile, kTile, kTile, __nv_bfloat16, wmma::row_major> p;
    wmma::load_matrix_sync(p, w.p, kTile);
    for (int d = 0; d < head_dim; d += kTile) {
      wmma::fragment<wmma::matrix_b, kTile, kTile, kTile, __nv_bfloat16, wmma::row_major> v;
      wmma::fragment<wmma::accumulator, kTile, kTile, kTile, float> pv;
      wmma::fill_fragment(pv, 0.0f);
      wmma::load_matrix_sync(v, &w.v[0][d], kLd);
      wmma::mma_sync(pv, p, v, pv);
      wmma::store_matrix_sync(w.product, pv, kTile, wmma::mem_row_major);
      __syncwarp();
      for (int i = lane; i < kTile * kTile; i += kWarp) {
        const int r = i / kTile, c = i % kTile;
        w.out[r][d + c] = w.out[r][d + c] * w.rescale[r] + w.product[i];
      }
      __syncwarp();
    }
  }
  if (lane < kTile) w.sum[lane] = l;
  __syncwarp();
  for (int i = lane; i < rows * head_dim; i += kWarp) {
    const int r = i / head_dim, d = i % head_dim;
    out[(static_cast<std::int64_t>(first + row0 + r) * heads + h) * head_dim + d] = w.out[r][d] / w.sum[r];
  }
}

}  // namespace

bool tensor_core_tiles(int head_dim, int block_tokens) {
  return head_dim > 0 && head_dim % kTile == 0 && head_dim <= kMaxTiledHeadDim && block_tokens > 0 && block_tokens % kTile == 0;
}

int tiled_attention_tc_cuda(const float* q, PagedQueries pq, int tokens, int heads, int kv_heads, int head_dim, const bf16_t* k_cache,
                            const bf16_t* v_cache, float* out, void* stream) {
  if (!tensor_core_tiles(head_dim, pq.block_tokens) || kv_heads <= 0 || heads % kv_heads != 0) return static_cast<int>(cudaErrorInvalidValue);
  if (tokens < kMinTileQueries) return 0;
  return launch_kernel(tiled_attention_tc_kernel, dim3(blocks_for(tokens, kTileQueries), heads), kRowWarps * kWarp, 0, as_stream(stream),
                       q, pq, tokens, heads, kv_heads, head_dim, k_cache, v_cache, out);
}

}  // namespace mosaic::kernels
