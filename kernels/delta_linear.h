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

// The CUDA kernel (delta_linear.cu): x, y and `d`'s arrays in device memory. Returns the launch's
// cudaError_t (0: launched). Built wherever nvcc is; the gpu-labelled tst_cuda_kernels checks it
// against delta_linear_reference.
int delta_linear_cuda(const float* x, int n, const DeltaView& d, bool accumulate, float* y, std::int64_t ldy, void* stream);

// Rows [r0, r1) of `d` as a view of their own (their words, places, scales and zeros).
DeltaView delta_rows(const DeltaView& d, std::int64_t r0, std::int64_t r1);

float f16_to_float(std::uint16_t h);

}  // namespace mosaic::kernels
