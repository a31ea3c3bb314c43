// Small kernels that pin down what simt must do as a GPU does: collectives, barriers, partial warps,
// grids, per-thread arguments, launch checks, and a lane that never reaches a collective. Written as
// CUDA (compiled through rewrite_launches.cmake as the kernels are); tst_simt checks their outputs.
#include <cuda_runtime.h>

#include "simt/probe_kernels.h"

namespace simt_probe {
namespace {

// Per lane of a 64-thread block: [0] warp total by xor shuffles, [1] inclusive prefix by shuffles up,
// [2] ballot of odd lanes, [3] match of lane / 4, [4] any lane > 30, [5] all lanes < 32,
// [6] lane + 1's value within segments of 8 (down), [7] lane 3's value within segments of 8.
__global__ void collectives_kernel(int* out) {
  const int lane = threadIdx.x % 32;
  int* o = out + threadIdx.x * 8;
  int sum = lane;
  for (int m = 16; m > 0; m /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, m);
  o[0] = sum;
  int prefix = lane;
  for (int d = 1; d < 32; d *= 2) {
    const int up = __shfl_up_sync(0xffffffffu, prefix, d);
    if (lane >= d) prefix += up;
  }
  o[1] = prefix;
  o[2] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 2));
  o[3] = static_cast<int>(__match_any_sync(0xffffffffu, lane / 4));
  o[4] = __any_sync(0xffffffffu, lane > 30);
  o[5] = __all_sync(0xffffffffu, lane < 32);
  o[6] = __shfl_down_sync(0xffffffffu, lane * 10, 1, 8);
  o[7] = __shfl_sync(0xffffffffu, lane * 10, 3, 8);
}

// A block of `n` threads whose last warp is partial: each warp's sum of its thread ids.
__global__ void partial_warp_kernel(int* out) {
  int v = static_cast<int>(threadIdx.x);
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  if (threadIdx.x % 32 == 0) out[threadIdx.x / 32] = v;
}

// Each thread reads its neighbour's shared word after a barrier; __syncthreads_or of one thread's flag.
__global__ void barrier_kernel(int* out, int flagged) {
  __shared__ int words[256];
  words[threadIdx.x] = static_cast<int>(threadIdx.x) * 3;
  __syncthreads();
  out[threadIdx.x] = words[(threadIdx.x + 1) % blockDim.x];
  out[blockDim.x + threadIdx.x] = __syncthreads_or(static_cast<int>(threadIdx.x) == flagged);
}

// Threads past `alive` return before the barrier the others wait at.
__global__ void early_exit_kernel(int* out, int alive) {
  if (static_cast<int>(threadIdx.x) >= alive) return;
  __shared__ int total;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  atomicAdd(&total, 1);
  __syncthreads();
  out[threadIdx.x] = total;
}

// Lane 0 leaves; the rest shuffle over a mask that still names it.
__global__ void missing_lane_kernel(int* out) {
  if (threadIdx.x == 0) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

// Every (block, thread) of a 3-D grid marks its own cell.
__global__ void grid_kernel(int* out) {
  const int block = static_cast<int>((blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x);
  const int thread = static_cast<int>((threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x);
  out[block * static_cast<int>(blockDim.x * blockDim.y * blockDim.z) + thread] += 1;
}

// A parameter each thread changes: its own copy.
__global__ void own_arguments_kernel(int* out, int step) {
  out += threadIdx.x;
  step += static_cast<int>(threadIdx.x);
  *out = step;
}

__global__ void dynamic_shared_kernel(float* out) {
  extern __shared__ float scratch[];
  scratch[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = scratch[(threadIdx.x + 1) % blockDim.x];
}

// Each block's order of first runs: its threads take tickets as they start.
__global__ void start_order_kernel(int* tickets, int* counters) {
  tickets[blockIdx.x * blockDim.x + threadIdx.x] = atomicAdd(&counters[blockIdx.x], 1);
}

// Two warps taking four tickets each, lane 0 a ticket between warp barriers: on a GPU a warp may take
// all of its tickets before the other takes one.
__global__ void warp_order_kernel(int* tickets, int* counters) {
  for (int i = 0; i < 4; ++i) {
    if (threadIdx.x % 32 == 0) tickets[(blockIdx.x * 2 + threadIdx.x / 32) * 4 + i] = atomicAdd(&counters[blockIdx.x], 1);
    __syncwarp();
  }
}

int last() { return static_cast<int>(cudaGetLastError()); }

}  // namespace

int collectives(int* out) {
  collectives_kernel<<<1, 64>>>(out);
  return last();
}
int partial_warp(int threads, int* out) {
  partial_warp_kernel<<<1, threads>>>(out);
  return last();
}
int barrier(int threads, int flagged, int* out) {
  barrier_kernel<<<1, threads>>>(out, flagged);
  return last();
}
int early_exit(int threads, int alive, int* out) {
  early_exit_kernel<<<1, threads>>>(out, alive);
  return last();
}
int missing_lane(int* out) {
  missing_lane_kernel<<<1, 32>>>(out);
  return last();
}
int grid(Shape grid, Shape block, int* out) {
  grid_kernel<<<dim3(grid.x, grid.y, grid.z), dim3(block.x, block.y, block.z)>>>(out);
  return last();
}
int own_arguments(int threads, int step, int* out) {
  own_arguments_kernel<<<1, threads>>>(out, step);
  return last();
}
int own_arguments_on(cudaStream_t stream, int threads, int step, int* out) {
  own_arguments_kernel<<<1, threads, 0, stream>>>(out, step);
  return last();
}
int dynamic_shared(int threads, std::size_t bytes, float* out) {
  dynamic_shared_kernel<<<1, threads, bytes>>>(out);
  return last();
}
int start_order(int blocks, int threads, int* tickets, int* counters) {
  start_order_kernel<<<blocks, threads>>>(tickets, counters);
  return last();
}
int warp_order(int blocks, int* tickets, int* counters) {
  warp_order_kernel<<<blocks, 64>>>(tickets, counters);
  return last();
}
int allow_dynamic_shared(int bytes) {
  return static_cast<int>(cudaFuncSetAttribute(dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

}  // namespace simt_probe
