// y (+)= x · Δ̂ᵀ on the device, Δ̂ read from its packed arrays (docs/delta-format.md) and dequantized
// in registers, never stored dense. One warp per output row: the lanes stride over the row's value
// words, so a warp's loads of codes are contiguous; 2:4 places pick the x columns; the scale and zero
// are reread only when a code's group changes. Tokens go through in chunks of kTokens, so decode
// (n = 1) reads each packed byte once: the kernel is bound by the packed bytes, as a GEMV should be.
#include <cuda_fp16.h>

#include "kernels/delta_linear.h"
#include "kernels/kernel_util.cuh"

namespace mosaic::kernels {
namespace {

constexpr int kTokens = 8;        // accumulators per lane
constexpr int kRowsPerBlock = 4;  // warps per block

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

template <int Bits, bool Sparse>
int launch(const float* x, int n, const DeltaView& d, bool accumulate, float* y, std::int64_t ldy, cudaStream_t stream) {
  const dim3 grid(blocks_for(d.rows, kRowsPerBlock), static_cast<unsigned>((n + kTokens - 1) / kTokens));
  return launch_kernel(delta_rows_kernel<Bits, Sparse>, grid, kRowsPerBlock * kWarp, 0, stream, x, n, d, accumulate, y, ldy);
}

}  // namespace

int delta_linear_cuda(const float* x, int n, const DeltaView& d, bool accumulate, float* y, std::int64_t ldy, void* stream) {
  if (n <= 0 || d.rows <= 0) return 0;
  if (ldy == 0) ldy = d.rows;
  const cudaStream_t s = as_stream(stream);
  if (d.bits == 4) return d.sparse24 ? launch<4, true>(x, n, d, accumulate, y, ldy, s) : launch<4, false>(x, n, d, accumulate, y, ldy, s);
  return d.sparse24 ? launch<2, true>(x, n, d, accumulate, y, ldy, s) : launch<2, false>(x, n, d, accumulate, y, ldy, s);
}

}  // namespace mosaic::kernels
