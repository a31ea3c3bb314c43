#include <algorithm>

#include "kernels/kernel_util.cuh"
#include "kernels/transformer_ops.h"

namespace mosaic::kernels {
namespace {

__global__ void embed_rows_kernel(const bf16_t* table, const std::int32_t* ids, int width, float* out) {
  wait_for_previous_grid();
  const int t = blockIdx.x;
  const bf16_t* row = table + static_cast<std::int64_t>(ids[t]) * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) out[static_cast<std::int64_t>(t) * width + i] = bf16_bits_to_float(row[i]);
}

__global__ void rms_norm_kernel(const float* x, const bf16_t* w, int width, float eps, float* out) {
  wait_for_previous_grid();
  __shared__ float partial[kWarp];
  const std::int64_t at = static_cast<std::int64_t>(blockIdx.x) * width;
  rms_norm_row(x + at, w, width, eps, out + at, partial);
}

__global__ void rope_kernel(float* x, const float* cos, const float* sin, int heads, int head_dim) {
  wait_for_previous_grid();
  const int t = blockIdx.x, half = head_dim / 2;
  const float* c = cos + static_cast<std::int64_t>(t) * head_dim;
  const float* s = sin + static_cast<std::int64_t>(t) * head_dim;
  for (int i = threadIdx.x; i < heads * half; i += blockDim.x)
    rotate_pair(x + (static_cast<std::int64_t>(t) * heads + i / half) * head_dim, c, s, i % half, half);
}

__global__ void silu_mul_kernel(const float* gate, const float* up, int rows, int width, float* out) {
  wait_for_previous_grid();
  const std::int64_t n = static_cast<std::int64_t>(rows) * width;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / width, c = i % width;
    const float g = up ? gate[i] : gate[r * 2 * width + c];
    const float u = up ? up[i] : gate[r * 2 * width + width + c];
    out[i] = g / (1.0f + __expf(-g)) * u;
  }
}

__global__ void clamp_kernel(float* x, std::int64_t n, float limit) {
  wait_for_previous_grid();
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    x[i] = fminf(fmaxf(x[i], -limit), limit);
}

__global__ void add_gated_kernel(float* x, const float* y, const float* gate, int rows, int width) {
  wait_for_previous_grid();
  const std::int64_t n = static_cast<std::int64_t>(rows) * width;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float s = gate ? 1.0f / (1.0f + __expf(-gate[i / width])) : 1.0f;
    x[i] += s * y[i];
  }
}

__global__ void float_to_bf16_kernel(const float* x, std::int64_t n, __nv_bfloat16* out) {
  wait_for_previous_grid();
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(x[i]);
}

__global__ void half_to_bf16_kernel(const __half* x, std::int64_t n, __nv_bfloat16* out) {
  wait_for_previous_grid();
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(__half2float(x[i]));
}

__global__ void widen_to_float_kernel(const std::uint16_t* x, std::int64_t n, bool half, float* out) {
  wait_for_previous_grid();
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = half ? __half2float(reinterpret_cast<const __half*>(x)[i]) : bf16_bits_to_float(x[i]);
}

__global__ void gather_rows_bf16_kernel(const float* x, int width, const std::int32_t* rows, int divisor, __nv_bfloat16* out) {
  wait_for_previous_grid();
  const float* src = x + static_cast<std::int64_t>(rows[blockIdx.x] / divisor) * width;
  __nv_bfloat16* dst = out + static_cast<std::int64_t>(blockIdx.x) * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void gather_rows_kernel(const float* x, int width, const std::int32_t* rows, int divisor, float* out) {
  wait_for_previous_grid();
  const float* src = x + static_cast<std::int64_t>(rows[blockIdx.x] / divisor) * width;
  float* dst = out + static_cast<std::int64_t>(blockIdx.x) * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) dst[i] = src[i];
}

__global__ void add_bias_kernel(float* y, const bf16_t* bias, int rows, int width) {
  wait_for_previous_grid();
  const std::int64_t n = static_cast<std::int64_t>(rows) * width;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    y[i] += bf16_bits_to_float(bias[i % width]);
}

// Grid-stride launches: enough blocks to fill the device, never more than the work.
unsigned stride_blocks(std::int64_t n) { return static_cast<unsigned>(std::min<std::int64_t>(blocks_for(n, 256), 4096)); }

}  // namespace

int embed_rows_cuda(const bf16_t* table, const std::int32_t* ids, int tokens, int width, float* out, void* stream) {
  if (tokens == 0) return 0;
  return launch_kernel(embed_rows_kernel, tokens, 256, 0, as_stream(stream), table, ids, width, out);
}

int rms_norm_cuda(const float* x, const bf16_t* w, int rows, int width, float eps, float* out, void* stream) {
  if (rows == 0) return 0;
  return launch_kernel(rms_norm_kernel, rows, rms_norm_threads(width), 0, as_stream(stream), x, w, width, eps, out);
}

int rope_cuda(float* x, const float* cos, const float* sin, int tokens, int heads, int head_dim, void* stream) {
  if (tokens == 0) return 0;
  return launch_kernel(rope_kernel, tokens, 256, 0, as_stream(stream), x, cos, sin, heads, head_dim);
}

int silu_mul_cuda(const float* gate, const float* up, int rows, int width, float* out, void* stream) {
  const std::int64_t n = static_cast<std::int64_t>(rows) * width;
  if (n == 0) return 0;
  return launch_kernel(silu_mul_kernel, stride_blocks(n), 256, 0, as_stream(stream), gate, up, rows, width, out);
}

int clamp_cuda(float* x, std::int64_t n, float limit, void* stream) {
  if (n == 0) return 0;
  return launch_kernel(clamp_kernel, stride_blocks(n), 256, 0, as_stream(stream), x, n, limit);
}

int add_gated_cuda(float* x, const float* y, const float* gate, int rows, int width, void* stream) {
  const std::int64_t n = static_cast<std::int64_t>(rows) * width;
  if (n == 0) return 0;
  return launch_kernel(add_gated_kernel, stride_blocks(n), 256, 0, as_stream(stream), x, y, gate, rows, width);
}

int float_to_bf16_cuda(const float* x, std::int64_t n, bf16_t* out, void* stream) {
  if (n == 0) return 0;
  return launch_kernel(float_to_bf16_kernel, stride_blocks(n), 256, 0, as_stream(stream), x, n, reinterpret_cast<__nv_bfloat16*>(out));
}

int half_to_bf16_cuda(const std::uint16_t* x, std::int64_t n, bf16_t* out, void* stream) {
  if (n == 0) return 0;
  return launch_kernel(half_to_bf16_kernel, stride_blocks(n), 256, 0, as_stream(stream), reinterpret_cast<const __half*>(x), n,
                       reinterpret_cast<__nv_bfloat16*>(out));
}

int widen_to_float_cuda(const std::uint16_t* x, std::int64_t n, bool half, float* out, void* stream) {
  if (n == 0) return 0;
  return launch_kernel(widen_to_float_kernel, stride_blocks(n), 256, 0, as_stream(stream), x, n, half, out);
}

int gather_rows_bf16_cuda(const float* x, int width, const std::int32_t* rows, int count, int divisor, bf16_t* out,
                          void* stream) {
  if (count == 0) return 0;
  return launch_kernel(gather_rows_bf16_kernel, count, 256, 0, as_stream(stream),
                       x, width, rows, divisor, reinterpret_cast<__nv_bfloat16*>(out));
}

int gather_rows_cuda(const float* x, int width, const std::int32_t* rows, int count, int divisor, float* out, void* stream) {
  if (count == 0) return 0;
  return launch_kernel(gather_rows_kernel, count, 256, 0, as_stream(stream), x, width, rows, divisor, out);
}

int add_bias_cuda(float* y, const bf16_t* bias, int rows, int width, void* stream) {
  const std::int64_t n = static_cast<std::int64_t>(rows) * width;
  if (n == 0) return 0;
  return launch_kernel(add_bias_kernel, stride_blocks(n), 256, 0, as_stream(stream), y, bias, rows, width);
}

}  // namespace mosaic::kernels
