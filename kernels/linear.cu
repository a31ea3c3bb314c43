#include "kernels/dot_rows.cuh"
#include "kernels/kv_rows.cuh"
#include "kernels/linear.h"

namespace mosaic::kernels {
namespace {

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

// Rotary: the launch's last block goes on to the q/k norms and clamp where given, the rotary
// embedding and the cache write (RotaryWrite).
template <int TOK, bool Normed, bool Rotary>
__global__ void linear_parts_kernel(const float* __restrict__ x, int n, int in, Parts parts, RowNorm norm, RotaryWrite then) {
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
  if (row < p.out) linear_row<TOK, Normed>(x, n, in, p.w, p.out, row, blockIdx.y * TOK, p.bias, false, p.y, norm);
  if constexpr (Rotary) {
    if (!last_block_done(then.counter)) return;
    __shared__ float partial[kWarp];
    for (int t = 0; t < n; ++t) {
      prepare_qkv_row(parts.part[0].y, parts.part[1].y, parts.part[2].y, then.prepare, t, then.heads, then.kv_heads, then.head_dim,
                      partial);
      rotary_kv_row(parts.part[0].y, parts.part[1].y, parts.part[2].y, then.cos, then.sin, then.pq, t, then.heads, then.kv_heads,
                    then.head_dim, reinterpret_cast<__nv_bfloat16*>(then.k_cache), reinterpret_cast<__nv_bfloat16*>(then.v_cache));
    }
  }
}

template <int TOK>
int launch(const float* x, int n, int in, const bf16_t* w, int out, const bf16_t* bias, bool accumulate, float* y, void* stream) {
  const dim3 grid(blocks_for(out, kRowsPerBlock), blocks_for(n, TOK));
  return launch_kernel(linear_kernel<TOK>, grid, kRowsPerBlock * kWarp, 0, as_stream(stream), x, n, in, w, out, bias, accumulate, y);
}

template <int TOK>
int launch_parts(const float* x, int n, int in, const Parts& parts, RowNorm norm, const RotaryWrite& then, void* stream) {
  const dim3 grid(static_cast<unsigned>(parts.first_block[parts.count]), blocks_for(n, TOK));
  const bool rotary = then.counter != nullptr;
  auto* kernel = norm.weight ? (rotary ? linear_parts_kernel<TOK, true, true> : linear_parts_kernel<TOK, true, false>)
                             : (rotary ? linear_parts_kernel<TOK, false, true> : linear_parts_kernel<TOK, false, false>);
  return launch_kernel(kernel, grid, kRowsPerBlock * kWarp, 0, as_stream(stream), x, n, in, parts, norm, then);
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

int linear_parts_cuda(const float* x, int n, int in, const LinearPart* parts, int count, void* stream, RowNorm norm,
                      const RotaryWrite& then) {
  if (count < 1 || count > kMaxLinearParts || n > 8) return static_cast<int>(cudaErrorInvalidValue);
  if (then.counter && (count != 3 || then.head_dim <= 0 || then.heads <= 0 || then.kv_heads <= 0)) return static_cast<int>(cudaErrorInvalidValue);
  Parts p{};
  p.count = count;
  for (int i = 0; i < count; ++i) {
    p.part[i] = parts[i];
    p.first_block[i + 1] = p.first_block[i] + static_cast<int>(blocks_for(parts[i].out, kRowsPerBlock));
  }
  if (n == 0 || p.first_block[count] == 0) return 0;
  if (n == 1) return launch_parts<1>(x, n, in, p, norm, then, stream);
  if (n == 2) return launch_parts<2>(x, n, in, p, norm, then, stream);
  if (n <= 4) return launch_parts<4>(x, n, in, p, norm, then, stream);
  return launch_parts<8>(x, n, in, p, norm, then, stream);
}

}  // namespace mosaic::kernels
