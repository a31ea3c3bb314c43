#include "kernels/dot_rows.cuh"
#include "kernels/linear.h"

namespace mosaic::kernels {
namespace {

template <int TOK>
__global__ void linear_kernel(const float* __restrict__ x, int n, int in, const bf16_t* __restrict__ w, int out,
                              const bf16_t* __restrict__ bias, bool accumulate, float* __restrict__ y) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= out) return;
  const int first = blockIdx.y * TOK;
  const float* xs[TOK];
  const int count = row_pointers<TOK>(x, in, first, n, xs);
  float acc[TOK];
  dot_rows<TOK>(w + static_cast<std::int64_t>(row) * in, in, xs, count, acc);
  if (threadIdx.x % kWarp != 0) return;
  const float b = bias ? bf16_bits_to_float(bias[row]) : 0.0f;
#pragma unroll
  for (int t = 0; t < TOK; ++t) {
    if (t >= count) break;
    float& dst = y[static_cast<std::int64_t>(first + t) * out + row];
    dst = (accumulate ? dst : 0.0f) + acc[t] + b;
  }
}

template <int TOK>
int launch(const float* x, int n, int in, const bf16_t* w, int out, const bf16_t* bias, bool accumulate, float* y, void* stream) {
  const dim3 grid(blocks_for(out, kRowsPerBlock), blocks_for(n, TOK));
  linear_kernel<TOK><<<grid, kRowsPerBlock * kWarp, 0, as_stream(stream)>>>(x, n, in, w, out, bias, accumulate, y);
  return launched();
}

}  // namespace

int linear_cuda(const float* x, int n, int in, const bf16_t* w, int out, const bf16_t* bias, bool accumulate, float* y,
                void* stream) {
  if (n == 0 || out == 0) return 0;
  if (n == 1) return launch<1>(x, n, in, w, out, bias, accumulate, y, stream);
  if (n == 2) return launch<2>(x, n, in, w, out, bias, accumulate, y, stream);
  if (n <= 4) return launch<4>(x, n, in, w, out, bias, accumulate, y, stream);
  return launch<8>(x, n, in, w, out, bias, accumulate, y, stream);
}

}  // namespace mosaic::kernels
