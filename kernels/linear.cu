#include "kernels/dot_rows.cuh"
#include "kernels/linear.h"

namespace mosaic::kernels {
namespace {

// Weight row `row` against rows [first, first + TOK) of x, by one warp.
// Normed: against x's rows RMS-normalized by `norm` (dot_rows_normed). A template parameter, so that
// the plain kernels keep their registers (linear_parts_kernel<8>: 64, where 68 would round to 72).
template <int TOK, bool Normed = false>
__device__ __forceinline__ void linear_row(const float* __restrict__ x, int n, int in, const bf16_t* __restrict__ w, int out, int row,
                                           int first, const bf16_t* __restrict__ bias, bool accumulate, float* __restrict__ y,
                                           RowNorm norm = {}) {
  const float* xs[TOK];
  const int count = row_pointers<TOK>(x, in, first, n, xs);
  float acc[TOK];
  if constexpr (Normed) dot_rows_normed<TOK>(w + static_cast<std::int64_t>(row) * in, in, xs, count, norm.weight, norm.eps, acc);
  else dot_rows<TOK>(w + static_cast<std::int64_t>(row) * in, in, xs, count, acc);
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
__global__ void linear_kernel(const float* __restrict__ x, int n, int in, const bf16_t* __restrict__ w, int out,
                              const bf16_t* __restrict__ bias, bool accumulate, float* __restrict__ y) {
  wait_for_previous_grid();
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= out) return;
  linear_row<TOK>(x, n, in, w, out, row, blockIdx.y * TOK, bias, accumulate, y);
}

// The parts' row blocks end to end: part i has blocks [first_block[i], first_block[i + 1]).
struct Parts {
  LinearPart part[kMaxLinearParts];
  int first_block[kMaxLinearParts + 1];
  int count;
};

template <int TOK, bool Normed>
__global__ void linear_parts_kernel(const float* __restrict__ x, int n, int in, Parts parts, RowNorm norm) {
  wait_for_previous_grid();
  // The block's part, by constant indices only: a runtime index into the parameters would copy
  // them to local memory.
  const int block = blockIdx.x;
  LinearPart p = parts.part[0];
  int first = 0;
#pragma unroll
  for (int i = 1; i < kMaxLinearParts; ++i)
    if (i < parts.count && block >= parts.first_block[i]) {
      p = parts.part[i];
      first = parts.first_block[i];
    }
  const int row = (block - first) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= p.out) return;
  linear_row<TOK, Normed>(x, n, in, p.w, p.out, row, blockIdx.y * TOK, p.bias, false, p.y, norm);
}

template <int TOK>
int launch(const float* x, int n, int in, const bf16_t* w, int out, const bf16_t* bias, bool accumulate, float* y, void* stream) {
  const dim3 grid(blocks_for(out, kRowsPerBlock), blocks_for(n, TOK));
  return launch_kernel(linear_kernel<TOK>, grid, kRowsPerBlock * kWarp, 0, as_stream(stream), x, n, in, w, out, bias, accumulate, y);
}

template <int TOK>
int launch_parts(const float* x, int n, int in, const Parts& parts, RowNorm norm, void* stream) {
  const dim3 grid(static_cast<unsigned>(parts.first_block[parts.count]), blocks_for(n, TOK));
  return launch_kernel(norm.weight ? linear_parts_kernel<TOK, true> : linear_parts_kernel<TOK, false>, grid, kRowsPerBlock * kWarp, 0,
                       as_stream(stream), x, n, in, parts, norm);
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

int linear_parts_cuda(const float* x, int n, int in, const LinearPart* parts, int count, void* stream, RowNorm norm) {
  if (count < 1 || count > kMaxLinearParts || n > 8) return static_cast<int>(cudaErrorInvalidValue);
  Parts p{};
  p.count = count;
  for (int i = 0; i < count; ++i) {
    p.part[i] = parts[i];
    p.first_block[i + 1] = p.first_block[i] + static_cast<int>(blocks_for(parts[i].out, kRowsPerBlock));
  }
  if (n == 0 || p.first_block[count] == 0) return 0;
  if (n == 1) return launch_parts<1>(x, n, in, p, norm, stream);
  if (n == 2) return launch_parts<2>(x, n, in, p, norm, stream);
  if (n <= 4) return launch_parts<4>(x, n, in, p, norm, stream);
  return launch_parts<8>(x, n, in, p, norm, stream);
}

}  // namespace mosaic::kernels
