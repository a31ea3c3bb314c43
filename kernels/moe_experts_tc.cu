// The grouped SwiGLU on tensor cores (moe_experts.h): wmma's bf16 16×16×16 tiles, fp32 accumulators.
#include <mma.h>

#include "kernels/kernel_util.cuh"
#include "kernels/moe_experts.h"

namespace mosaic::kernels {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kTile = 16;
constexpr int kTcWarps = 4;                  // each its own 16 output features
constexpr int kTcFeatures = kTcWarps * kTile;  // a block's
constexpr int kTcRows = 32;                  // positions a pass: each warp's weight tiles serve two row tiles
constexpr int kTcChunk = 256;                // the inputs' columns staged in shared memory at once
constexpr int kTcLd = kTcChunk + kTile;      // a staged row's stride: 32-byte aligned tiles, fewer bank conflicts

// One group's rows (positions first … first + rows) times a slot's matrix: out[pos, n] for this
// warp's 16 features n, kTcRows positions a pass. The inputs are rounded to bf16 in shared memory
// (positions: `gather` ? x's row of the pair's token : the input's own row `pos`); the weights' tiles
// are read straight from the slot (a weight row is a column of the product's B, col_major).
// kSwiGlu: two matrices (gate rows, then up rows `features` later) and out = silu(gate) ∘ up.
template <bool kSwiGlu>
__global__ void __launch_bounds__(kTcWarps * kWarp)
    grouped_tc_kernel(const float* __restrict__ in, int width, bool gather, int k, int features, std::int64_t offset, GroupedPairs g,
                      float* __restrict__ out) {
  wait_for_previous_grid();
  if (static_cast<int>(blockIdx.y) >= *g.groups) return;
  alignas(32) __shared__ __nv_bfloat16 staged[kTcRows][kTcLd];
  alignas(32) __shared__ float result[kTcWarps][2][kTile * kTile];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int feature = static_cast<int>(blockIdx.x) * kTcFeatures + warp * kTile;
  const bool mine = feature < features;  // whole tiles: features is a multiple of 16
  const auto* w = reinterpret_cast<const __nv_bfloat16*>(g.weights[blockIdx.y] + offset);
  const __nv_bfloat16* first_rows = w + static_cast<std::int64_t>(feature) * width;
  const __nv_bfloat16* second_rows = first_rows + static_cast<std::int64_t>(features) * width;
  const int begin = g.begin[blockIdx.y], end = g.end[blockIdx.y];
  constexpr int kM = kTcRows / kTile;
  for (int first = begin; first < end; first += kTcRows) {
    const int rows = min(kTcRows, end - first), tiles = (rows + kTile - 1) / kTile;
    wmma::fragment<wmma::accumulator, kTile, kTile, kTile, float> acc[kM], acc2[kM];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      wmma::fill_fragment(acc[m], 0.0f);
      wmma::fill_fragment(acc2[m], 0.0f);
    }
    for (int c0 = 0; c0 < width; c0 += kTcChunk) {
      const int cols = min(kTcChunk, width - c0);
      __syncthreads();  // the chunk before is read
      for (int i = threadIdx.x; i < kTcRows * cols; i += blockDim.x) {
        const int r = i / cols, c = i % cols;
        float v = 0.0f;
        if (r < rows) {
          const std::int64_t row = gather ? g.pair_at[first + r] / k : first + r;
          v = in[row * width + c0 + c];
        }
        staged[r][c] = __float2bfloat16_rn(v);
      }
      __syncthreads();
      if (!mine) continue;
      for (int kk = 0; kk < cols; kk += kTile) {
        wmma::fragment<wmma::matrix_b, kTile, kTile, kTile, __nv_bfloat16, wmma::col_major> b, b2;
        wmma::load_matrix_sync(b, first_rows + c0 + kk, width);
        if constexpr (kSwiGlu) wmma::load_matrix_sync(b2, second_rows + c0 + kk, width);
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          if (m >= tiles) break;  // the same for every lane of the warp
          wmma::fragment<wmma::matrix_a, kTile, kTile, kTile, __nv_bfloat16, wmma::row_major> a;
          wmma::load_matrix_sync(a, &staged[m * kTile][kk], kTcLd);
          wmma::mma_sync(acc[m], a, b, acc[m]);
          if constexpr (kSwiGlu) wmma::mma_sync(acc2[m], a, b2, acc2[m]);
        }
      }
    }
    if (!mine) continue;
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      if (m >= tiles) break;
      wmma::store_matrix_sync(result[warp][0], acc[m], kTile, wmma::mem_row_major);
      if constexpr (kSwiGlu) wmma::store_matrix_sync(result[warp][1], acc2[m], kTile, wmma::mem_row_major);
      __syncwarp();
      for (int i = lane; i < kTile * kTile; i += kWarp) {
        const int r = m * kTile + i / kTile, c = i % kTile;
        if (r >= rows) continue;
        float v = result[warp][0][i];
        if constexpr (kSwiGlu) v = v / (1.0f + __expf(-v)) * result[warp][1][i];
        out[static_cast<std::int64_t>(first + r) * features + feature + c] = v;
      }
      __syncwarp();  // the tile is read before the next one is stored
    }
  }
}

}  // namespace

bool tensor_core_shapes(int hidden, int inter) { return hidden > 0 && inter > 0 && hidden % kTile == 0 && inter % kTile == 0; }

int expert_gate_up_tc_cuda(const float* x, int hidden, int inter, int k, GroupedPairs g, int max_groups, float* act, void* stream) {
  if (max_groups == 0) return 0;
  if (!tensor_core_shapes(hidden, inter) || k <= 0) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(blocks_for(inter, kTcFeatures), static_cast<unsigned>(max_groups));
  return launch_kernel(grouped_tc_kernel<true>, grid, kTcWarps * kWarp, 0, as_stream(stream), x, hidden, true, k, inter, std::int64_t{0}, g,
                       act);
}

int expert_down_tc_cuda(const float* act, int hidden, int inter, GroupedPairs g, int max_groups, float* out, void* stream) {
  if (max_groups == 0) return 0;
  if (!tensor_core_shapes(hidden, inter)) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(blocks_for(hidden, kTcFeatures), static_cast<unsigned>(max_groups));
  return launch_kernel(grouped_tc_kernel<false>, grid, kTcWarps * kWarp, 0, as_stream(stream), act, inter, false, 1, hidden,
                       2 * static_cast<std::int64_t>(inter) * hidden, g, out);
}

}  // namespace mosaic::kernels
