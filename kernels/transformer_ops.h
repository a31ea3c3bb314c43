#pragma once
// The element-wise and row-wise pieces of a decoder layer, on device pointers: embedding rows,
// RMSNorm, rotary embedding, SwiGLU's gate, clamping, bf16 conversion. Activations are fp32,
// weights bf16. Each CUDA entry point launches on `stream` (a cudaStream_t) and returns the launch's
// cudaError_t as an int; each has a CPU reference of the same signature on host pointers.
#include <cstdint>

#include "kernels/bf16.h"

namespace mosaic::kernels {

// out[t, :] = table[ids[t], :] as fp32.
int embed_rows_cuda(const bf16_t* table, const std::int32_t* ids, int tokens, int width, float* out, void* stream);
void embed_rows_reference(const bf16_t* table, const std::int32_t* ids, int tokens, int width, float* out);

// out[r, :] = w * (x[r, :] * rsqrt(mean(x[r, :]²) + eps)), rows of `width`; out may be x.
int rms_norm_cuda(const float* x, const bf16_t* w, int rows, int width, float eps, float* out, void* stream);
void rms_norm_reference(const float* x, const bf16_t* w, int rows, int width, float eps, float* out);

// In place on x [tokens, heads, head_dim]: x·cos + rotate_half(x)·sin with cos, sin [tokens, head_dim]
// (transformers' non-interleaved halves).
int rope_cuda(float* x, const float* cos, const float* sin, int tokens, int heads, int head_dim, void* stream);
void rope_reference(float* x, const float* cos, const float* sin, int tokens, int heads, int head_dim);

// out[i] = silu(gate[i]) * up[i] over rows of `width` taken from gate_up [rows, 2·width] (gate
// columns first) when `up` is null, else from gate and up [rows, width] each.
int silu_mul_cuda(const float* gate, const float* up, int rows, int width, float* out, void* stream);
void silu_mul_reference(const float* gate, const float* up, int rows, int width, float* out);

// x[i] = clamp(x[i], -limit, limit).
int clamp_cuda(float* x, std::int64_t n, float limit, void* stream);
void clamp_reference(float* x, std::int64_t n, float limit);

// x[r, :] += sigmoid(gate[r]) · y[r, :] (Qwen2-MoE's shared expert), or x += y when gate is null.
int add_gated_cuda(float* x, const float* y, const float* gate, int rows, int width, void* stream);
void add_gated_reference(float* x, const float* y, const float* gate, int rows, int width);

// out[i] = bf16(x[i]); and the weight conversions a load needs when a checkpoint is not bf16.
int float_to_bf16_cuda(const float* x, std::int64_t n, bf16_t* out, void* stream);
int half_to_bf16_cuda(const std::uint16_t* x, std::int64_t n, bf16_t* out, void* stream);
// out[i] = float(x[i]) of bf16 words, or of f16 ones where `half`: a tensor held in fp32 on the device.
int widen_to_float_cuda(const std::uint16_t* x, std::int64_t n, bool half, float* out, void* stream);

// out[i, :] = bf16(x[rows[i] / divisor, :]): the rows a grouped GEMM reads, gathered.
int gather_rows_bf16_cuda(const float* x, int width, const std::int32_t* rows, int count, int divisor, bf16_t* out,
                          void* stream);

// out[i, :] = x[rows[i] / divisor, :] (fp32).
int gather_rows_cuda(const float* x, int width, const std::int32_t* rows, int count, int divisor, float* out, void* stream);

// y[r, :] += bias (bf16) over rows of `width`.
int add_bias_cuda(float* y, const bf16_t* bias, int rows, int width, void* stream);

}  // namespace mosaic::kernels
