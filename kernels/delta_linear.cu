// y (+)= x · Δ̂ᵀ on the device, Δ̂ read from its packed arrays (docs/delta-format.md) and dequantized
// in registers, never stored dense. Two kernels (delta_linear.h says when each runs).
//
// The floor: a decode GEMV moves the packed bytes once, 0.398 bytes a weight for 4-bit 2:4 at group
// 128 against bf16's 2, so the delta product's floor is 0.2× the dense one's. Reaching it takes the
// instructions a weight down to a few: codes become floats by OR-ing them into 2^23's mantissa and
// subtracting 2^23 + zero (exact: no int-to-float conversion, a quarter-rate instruction), the group's
// scale is applied once per lane's 32 columns, and x comes from shared memory, where lanes 32 columns
// apart land in distinct banks (a pad word every 32 columns).
#include <cuda_fp16.h>

#include "kernels/delta_linear.h"
#include "kernels/kernel_util.cuh"

namespace mosaic::kernels {
namespace {

constexpr int kTokens = 8;        // accumulators per lane
constexpr int kRowsPerBlock = 4;  // warps per block

// The rows kernel: one warp per output row, the lanes striding over the row's value words, so a
// warp's loads of codes are contiguous; 2:4 places pick the x columns; the scale and zero are reread
// only when a code's group changes. Tokens go through in chunks of kTokens.

template <int Bits, bool Sparse>
__global__ void delta_rows_kernel(const float* __restrict__ x, int n, DeltaView d, bool accumulate, float* __restrict__ y,
                                  std::int64_t ldy) {
  wait_for_previous_grid();
  constexpr int per = 32 / Bits;
  constexpr std::uint32_t mask = (1u << Bits) - 1;
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= d.rows) return;
  const int lane = threadIdx.x % kWarp;
  const std::int64_t kept = Sparse ? d.cols / 2 : d.cols;
  const std::int64_t vw = (kept + per - 1) / per, mw = Sparse ? (kept + 15) / 16 : 0;
  const std::int64_t groups = (d.cols + d.group - 1) / d.group, kept_per_group = Sparse ? d.group / 2 : d.group;
  const std::uint32_t* values = d.qweight + r * vw;
  const std::uint32_t* places = Sparse ? d.meta + r * mw : nullptr;
  const std::uint16_t* scales = d.scales + r * groups;
  const std::uint8_t* zeros = d.zeros + r * groups;
  const int t0 = blockIdx.y * kTokens, tn = min(kTokens, n - t0);
  const float* xt = x + static_cast<std::int64_t>(t0) * d.cols;

  float acc[kTokens];
#pragma unroll
  for (int t = 0; t < kTokens; ++t) acc[t] = 0.0f;
  for (std::int64_t w = lane; w < vw; w += kWarp) {
    const std::uint32_t word = values[w];
    std::int64_t g = -1;
    float s = 0.0f, z = 0.0f;
#pragma unroll
    for (int i = 0; i < per; ++i) {
      const std::int64_t k = w * per + i;
      if (k >= kept) break;
      if (k / kept_per_group != g) {
        g = k / kept_per_group;
        s = __half2float(__ushort_as_half(scales[g]));
        z = static_cast<float>(zeros[g]);
      }
      const float v = s * (static_cast<float>((word >> (i * Bits)) & mask) - z);
      std::int64_t c = k;
      if constexpr (Sparse) c = (k / 2) * 4 + ((places[k / 16] >> ((k % 16) * 2)) & 3u);
#pragma unroll
      for (int t = 0; t < kTokens; ++t)
        if (t < tn) acc[t] = fmaf(v, xt[static_cast<std::int64_t>(t) * d.cols + c], acc[t]);
    }
  }
#pragma unroll
  for (int t = 0; t < kTokens; ++t) {
    const float sum = warp_sum(acc[t]);
    if (lane == 0 && t < tn) {
      float& out = y[static_cast<std::int64_t>(t0 + t) * ldy + r];
      out = (accumulate ? out : 0.0f) + sum;
    }
  }
}

// The tiles kernel. A block of kTileWarps warps takes kTileWarps · Rows consecutive rows and up to
// Tokens tokens (1, 2, 4 or 8: a decode step's one token issues no work for seven absent ones). For
// each tile of kTileCols columns the block stages those tokens' x in shared memory, then each lane
// takes kLaneCols consecutive columns of each of its warp's Rows rows: one vector load of their codes
// (Rows loads in flight before any is used), one meta word, one scale and zero.
constexpr int kTileCols = 1024;
constexpr int kLaneCols = kTileCols / kWarp;      // 32: within one group (delta_tiles_fit)
constexpr int kTileStride = kTileCols + kWarp;    // a token's row in shared memory, a pad word per lane
constexpr int kTileWarps = 8;

template <int Words>
struct CodeWords;  // the vector load of a lane's codes
template <>
struct CodeWords<1> {
  static __device__ __forceinline__ void load(const std::uint32_t* p, std::uint32_t* w) { w[0] = *p; }
};
template <>
struct CodeWords<2> {
  static __device__ __forceinline__ void load(const std::uint32_t* p, std::uint32_t* w) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x, w[1] = v.y;
  }
};
template <>
struct CodeWords<4> {
  static __device__ __forceinline__ void load(const std::uint32_t* p, std::uint32_t* w) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  }
};

template <int Bits, bool Sparse>
constexpr int kLaneWords = (Sparse ? kLaneCols / 2 : kLaneCols) / (32 / Bits);  // a lane's code words

template <int Bits, bool Sparse, int Rows, int Tokens>
__global__ void __launch_bounds__(kTileWarps * kWarp) delta_tiles_kernel(const float* __restrict__ x, int n, DeltaView d, bool accumulate,
                                                                         float* __restrict__ y, std::int64_t ldy) {
  wait_for_previous_grid();
  __shared__ float xs[Tokens * kTileStride];
  constexpr int per = 32 / Bits, kept_lane = Sparse ? kLaneCols / 2 : kLaneCols, words = kLaneWords<Bits, Sparse>;
  constexpr std::uint32_t mask = (1u << Bits) - 1;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const std::int64_t r0 = (static_cast<std::int64_t>(blockIdx.x) * kTileWarps + warp) * Rows;
  const std::int64_t kept = Sparse ? d.cols / 2 : d.cols, vw = kept / per, mw = kept / 16, groups = (d.cols + d.group - 1) / d.group;
  const int t0 = blockIdx.y * Tokens, tn = min(Tokens, n - t0);

  float acc[Rows][Tokens];
#pragma unroll
  for (int i = 0; i < Rows; ++i)
#pragma unroll
    for (int t = 0; t < Tokens; ++t) acc[i][t] = 0.0f;

  for (std::int64_t tile = 0; tile < d.cols; tile += kTileCols) {
    const int width = d.cols - tile < kTileCols ? static_cast<int>(d.cols - tile) : kTileCols;
    __syncthreads();  // the last tile's x is no longer read
    for (int i = threadIdx.x; i < tn * kTileCols; i += blockDim.x) {
      const int t = i / kTileCols, c = i % kTileCols;
      if (c < width) xs[t * kTileStride + c + c / kLaneCols] = x[static_cast<std::int64_t>(t0 + t) * d.cols + tile + c];
    }
    __syncthreads();
    const int lc = lane * kLaneCols;
    if (lc >= width) continue;  // widths are multiples of kLaneCols: a lane has all its columns or none
    const std::int64_t c0 = tile + lc, k0 = Sparse ? c0 / 2 : c0, g = c0 / d.group;
    std::uint32_t code[Rows][words], places[Rows];
    float scale[Rows], zero[Rows];
#pragma unroll
    for (int i = 0; i < Rows; ++i) {
      const std::int64_t r = r0 + i;
      if (r < d.rows) {
        CodeWords<words>::load(d.qweight + r * vw + k0 / per, code[i]);
        places[i] = Sparse ? d.meta[r * mw + k0 / 16] : 0u;
        scale[i] = __half2float(__ushort_as_half(d.scales[r * groups + g]));
        zero[i] = 8388608.0f + static_cast<float>(d.zeros[r * groups + g]);  // 2^23 + z
      } else {
#pragma unroll
        for (int w = 0; w < words; ++w) code[i][w] = 0u;
        places[i] = 0u, scale[i] = 0.0f, zero[i] = 8388608.0f;
      }
    }
    const float* xl = xs + lc + lane;  // column lc + j of token t at xl[t · kTileStride + j]
#pragma unroll
    for (int i = 0; i < Rows; ++i) {
      float part[Tokens];
#pragma unroll
      for (int t = 0; t < Tokens; ++t) part[t] = 0.0f;
#pragma unroll
      for (int j = 0; j < kept_lane; ++j) {
        const std::uint32_t q = (code[i][j / per] >> ((j % per) * Bits)) & mask;
        const float v = __uint_as_float(0x4B000000u | q) - zero[i];  // (2^23 + q) − (2^23 + z): q − z exactly
        const int c = Sparse ? (j / 2) * 4 + static_cast<int>((places[i] >> (2 * j)) & 3u) : j;
#pragma unroll
        for (int t = 0; t < Tokens; ++t)
          if (t < tn) part[t] = fmaf(v, xl[t * kTileStride + c], part[t]);
      }
#pragma unroll
      for (int t = 0; t < Tokens; ++t) acc[i][t] = fmaf(scale[i], part[t], acc[i][t]);
    }
  }
#pragma unroll
  for (int i = 0; i < Rows; ++i)
#pragma unroll
    for (int t = 0; t < Tokens; ++t) {
      const float sum = warp_sum(acc[i][t]);
      const std::int64_t r = r0 + i;
      if (lane == 0 && t < tn && r < d.rows) {
        float& out = y[static_cast<std::int64_t>(t0 + t) * ldy + r];
        out = (accumulate ? out : 0.0f) + sum;
      }
    }
}

template <int Bits, bool Sparse>
int launch_rows(const float* x, int n, const DeltaView& d, bool accumulate, float* y, std::int64_t ldy, cudaStream_t stream) {
  const dim3 grid(blocks_for(d.rows, kRowsPerBlock), static_cast<unsigned>((n + kTokens - 1) / kTokens));
  return launch_kernel(delta_rows_kernel<Bits, Sparse>, grid, kRowsPerBlock * kWarp, 0, stream, x, n, d, accumulate, y, ldy);
}

// Blocks the tiles kernel aims for: two per SM at least, so that enough loads are in flight.
int tiles_target_blocks() {
  static const int target = [] {
    int device = 0, sms = 0;
    if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      cudaGetLastError();  // not left for the next launch's check to report
      return 264;          // an H100's or H200's 132 SMs
    }
    return 2 * sms;
  }();
  return target;
}

template <int Bits, bool Sparse, int Rows, int Tokens>
int launch_tiles_of(const float* x, int n, const DeltaView& d, bool accumulate, float* y, std::int64_t ldy, cudaStream_t stream) {
  const dim3 grid(blocks_for(d.rows, kTileWarps * Rows), static_cast<unsigned>((n + Tokens - 1) / Tokens));
  return launch_kernel(delta_tiles_kernel<Bits, Sparse, Rows, Tokens>, grid, kTileWarps * kWarp, 0, stream, x, n, d, accumulate, y, ldy);
}

template <int Bits, bool Sparse, int Rows>
int launch_tiles_rows(const float* x, int n, const DeltaView& d, bool accumulate, float* y, std::int64_t ldy, cudaStream_t stream) {
  if (n == 1) return launch_tiles_of<Bits, Sparse, Rows, 1>(x, n, d, accumulate, y, ldy, stream);
  if (n == 2) return launch_tiles_of<Bits, Sparse, Rows, 2>(x, n, d, accumulate, y, ldy, stream);
  if (n <= 4) return launch_tiles_of<Bits, Sparse, Rows, 4>(x, n, d, accumulate, y, ldy, stream);
  return launch_tiles_of<Bits, Sparse, Rows, kTokens>(x, n, d, accumulate, y, ldy, stream);
}

// Rows a warp: as many as keep the grid at its target (more rows a warp: more loads in flight in each
// and x staged fewer times; fewer: more warps over the SMs).
template <int Bits, bool Sparse>
int launch_tiles(const float* x, int n, const DeltaView& d, bool accumulate, float* y, std::int64_t ldy, cudaStream_t stream) {
  const std::int64_t target = tiles_target_blocks();
  if (blocks_for(d.rows, kTileWarps * 4) >= target) return launch_tiles_rows<Bits, Sparse, 4>(x, n, d, accumulate, y, ldy, stream);
  if (blocks_for(d.rows, kTileWarps * 2) >= target) return launch_tiles_rows<Bits, Sparse, 2>(x, n, d, accumulate, y, ldy, stream);
  return launch_tiles_rows<Bits, Sparse, 1>(x, n, d, accumulate, y, ldy, stream);
}

template <int Bits, bool Sparse>
int launch(const float* x, int n, const DeltaView& d, bool accumulate, float* y, std::int64_t ldy, cudaStream_t stream, bool tiles) {
  return tiles ? launch_tiles<Bits, Sparse>(x, n, d, accumulate, y, ldy, stream) : launch_rows<Bits, Sparse>(x, n, d, accumulate, y, ldy, stream);
}

}  // namespace

bool delta_tiles_fit(const DeltaView& d) {
  if ((d.bits != 4 && d.bits != 2) || d.cols <= 0 || d.cols % kLaneCols != 0 || d.group <= 0 || d.group % kLaneCols != 0) return false;
  const int words = d.bits == 4 ? (d.sparse24 ? kLaneWords<4, true> : kLaneWords<4, false>)
                                : (d.sparse24 ? kLaneWords<2, true> : kLaneWords<2, false>);
  return reinterpret_cast<std::uintptr_t>(d.qweight) % (sizeof(std::uint32_t) * words) == 0;
}

int delta_linear_cuda(const float* x, int n, const DeltaView& d, bool accumulate, float* y, std::int64_t ldy, void* stream, DeltaKernel kernel) {
  const bool fits = delta_tiles_fit(d);
  if (kernel == DeltaKernel::tiles && !fits) return static_cast<int>(cudaErrorInvalidValue);
  if (n <= 0 || d.rows <= 0) return 0;
  if (ldy == 0) ldy = d.rows;
  const cudaStream_t s = as_stream(stream);
  const bool tiles = kernel != DeltaKernel::rows && fits;
  if (d.bits == 4)
    return d.sparse24 ? launch<4, true>(x, n, d, accumulate, y, ldy, s, tiles) : launch<4, false>(x, n, d, accumulate, y, ldy, s, tiles);
  return d.sparse24 ? launch<2, true>(x, n, d, accumulate, y, ldy, s, tiles) : launch<2, false>(x, n, d, accumulate, y, ldy, s, tiles);
}

}  // namespace mosaic::kernels
