#pragma once
// y = x · Wᵀ (+ bias) for the few rows of a decode step: x [n, in] fp32, W [out, in] bf16 (a
// checkpoint's row-major weight), y [n, out] fp32, accumulated in fp32. Memory-bound by design: each
// weight row is read once per 8 rows of x, so for n ≤ 8 the kernel moves W's bytes once; the backend
// sends larger n to cuBLAS. `accumulate`: y += instead of y =.
#include <cstdint>

#include "kernels/bf16.h"
#include "kernels/paged_attention.h"

namespace mosaic::kernels {

int linear_cuda(const float* x, int n, int in, const bf16_t* w, int out, const bf16_t* bias, bool accumulate, float* y,
                void* stream);
// Several weights that read the same x (q, k and v; a dense MLP's gate and up) in one launch: the
// kernel above over their rows end to end, y_i = x · W_iᵀ (+ bias_i). n ≤ 8 rows of x.
struct LinearPart {
  const bf16_t* w = nullptr;
  int out = 0;
  const bf16_t* bias = nullptr;
  float* y = nullptr;
};
constexpr int kMaxLinearParts = 4;
// With `norm`, x's rows RMS-normalized first, folded into the products (a decode step's input norm
// before q, k and v): y_i = (g ∘ x / rms(x)) · W_iᵀ, rms(x) = sqrt(mean(x²) + eps), as rms_norm_cuda
// normalizes, to float rounding.
struct RowNorm {
  const bf16_t* weight = nullptr;  // g [in]; none: x as it is
  float eps = 0;
};
// With `then` (a counter given), q, k and v (parts 0, 1 and 2) go on, in the same launch, to the
// rotary embedding and the cache write as rotary_kv_write_cuda makes them (its arguments; `tokens` is
// n): the launch's last block to finish takes them, so a decode layer's attention inputs cost one
// launch where they cost two. counter: a device unsigned, zero before; the launch leaves it zero.
// Before the rotary, where given, what some architectures put between it and the projections, in
// the backend's order: q and k RMS-normalized over the whole row (OLMoE), q, k and v clamped to
// ±clip, q and k normalized head by head (Qwen3) — as rms_norm_cuda and clamp_cuda make them, to
// float rounding (one block's sums in another order).
struct QkPrepare {
  const bf16_t *q_norm = nullptr, *k_norm = nullptr;  // none: no q/k norm
  bool per_head = false;                               // else over the whole row
  float eps = 0;
  float clip = 0;  // > 0: clamp
};
struct RotaryWrite {
  const float *cos = nullptr, *sin = nullptr;
  PagedQueries pq;
  int heads = 0, kv_heads = 0, head_dim = 0;
  bf16_t *k_cache = nullptr, *v_cache = nullptr;
  unsigned* counter = nullptr;
  QkPrepare prepare;
};
int linear_parts_cuda(const float* x, int n, int in, const LinearPart* parts, int count, void* stream, RowNorm norm = {},
                      const RotaryWrite& then = {});

void linear_reference(const float* x, int n, int in, const bf16_t* w, int out, const bf16_t* bias, bool accumulate, float* y);

}  // namespace mosaic::kernels
