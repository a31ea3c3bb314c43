#pragma once
// y = x · Δ̂ᵀ for a packed expert delta (docs/delta-format.md) without expanding it: x [n, cols] fp32,
// y [n, rows] fp32, Δ̂ read straight from its packed arrays (codes, 2:4 places, f16 scales, zeros).
// Per group the codes are summed against x first and the zero applied once:
// Σ (q − z)·s·x = s·(Σ q·x − z·Σ x). `accumulate`: y += instead of y = (the base's product is already
// there: DeltaMoE's W_base·x + Δ·x).
#include <cstdint>

namespace mosaic::kernels {

struct DeltaView {
  const std::uint32_t* qweight = nullptr;  // [rows, value words]
  const std::uint32_t* meta = nullptr;     // [rows, meta words]; null when dense
  const std::uint16_t* scales = nullptr;   // [rows, groups], f16 bits
  const std::uint8_t* zeros = nullptr;     // [rows, groups]
  std::int64_t rows = 0, cols = 0, group = 128;
  int bits = 4;
  bool sparse24 = true;
};

// `ldy`: y's row stride (0: d.rows), so that a block of rows writes into a wider output. Runs the
// AVX2 kernel where the CPU and the group size allow, else the scalar reference.
void delta_linear_cpu(const float* x, int n, const DeltaView& d, bool accumulate, float* y, std::int64_t ldy = 0);
// The scalar reference, and the AVX2 + FMA kernel (false, doing nothing, where it cannot run: no
// AVX2 or FMA, or groups of other than a multiple of 8 kept values).
void delta_linear_reference(const float* x, int n, const DeltaView& d, bool accumulate, float* y, std::int64_t ldy = 0);
bool delta_linear_avx2(const float* x, int n, const DeltaView& d, bool accumulate, float* y, std::int64_t ldy = 0);

// The CUDA kernels (delta_linear.cu): x, y and `d`'s arrays in device memory. Return the launch's
// cudaError_t (0: launched). tst_cuda_kernels checks both against delta_linear_reference, on the GPU
// and on simt.
// - rows: a warp per output row, its lanes striding over the row's words; any shape.
// - tiles: x staged in shared memory a tile of columns at a time, each lane reading 32 consecutive
//   columns' codes with one vector load and their x from shared memory; several rows a warp. The
//   rows kernel's lanes read x from L1 64 bytes apart, about 16 L1 wavefronts a warp's load, which
//   by count bounds a decode GEMV well above its packed bytes; this one should be bound by them
//   (bench-cuda's delta table times both against the dense bf16 GEMV). Takes views that
//   delta_tiles_fit; else the launch fails with cudaErrorInvalidValue.
// automatic: tiles where they fit, else rows (what the backend runs).
enum class DeltaKernel { automatic, rows, tiles };
int delta_linear_cuda(const float* x, int n, const DeltaView& d, bool accumulate, float* y, std::int64_t ldy, void* stream,
                      DeltaKernel kernel = DeltaKernel::automatic);
// Columns a multiple of 32, groups a multiple of 32 columns, and the arrays aligned for the vector
// loads (qweight to 16 bytes): true of every delta a checkpoint of usual shapes packs (group 128).
bool delta_tiles_fit(const DeltaView& d);

// Rows [r0, r1) of `d` as a view of their own (their words, places, scales and zeros).
DeltaView delta_rows(const DeltaView& d, std::int64_t r0, std::int64_t r1);

float f16_to_float(std::uint16_t h);

}  // namespace mosaic::kernels
