#pragma once
// Device helpers shared by the kernels' .cu files.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/l2_prefetch.h"
#include "kernels/launch.h"

namespace mosaic::kernels {

constexpr int kWarp = 32;

// The first statement of every kernel: under a programmatic launch (launch.h), waits until the grid
// before it has finished and its writes are visible; else returns at once. Then lets the grid after
// it launch: that grid's blocks may take the SMs this one's last blocks leave, and wait there in turn
// (a wait is for the whole grid's completion, not for this signal, so nothing is read early).
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* shared32) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_sum(v);
  __syncthreads();  // shared32 may still be read by a previous call
  if (lane == 0) shared32[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  v = lane < warps ? shared32[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float bf16_bits_to_float(std::uint16_t v) { return __uint_as_float(static_cast<unsigned>(v) << 16); }

// Eight bf16 packed in a uint4, unpacked to fp32.
__device__ __forceinline__ void unpack8(const uint4& w, float* f) {
  const unsigned u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(u[i] << 16);
    f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}

// Whether this block is the grid's last to get here; if so, every block's writes before the call are
// visible to it (the CUDA guide's threadfence reduction, in cooperative groups' order: the barrier
// gathers the block's writes, thread 0's fence releases them with the count, and its fence after
// the count acquires the others' before the barrier lets the block read). Lets a launch's last block
// go on with one block's worth of work that needs the whole grid's results, in place of a launch of
// its own. Every thread of every block calls it. `counter`: zero before the launch; the last block
// sets it back to zero. What the last block then reads of other blocks' writes it reads past L1
// (__ldcg): its SM's L1 may hold a stale copy of a line a neighbouring block wrote.
__device__ __forceinline__ bool last_block_done(unsigned* counter) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
    last = atomicAdd(counter, 1u) == blocks - 1;
    if (last) {
      __threadfence();
      *counter = 0;  // every block has counted: none counts again in this launch
    }
  }
  __syncthreads();
  return last;
}

// Block `part` of `parts` asks the L2 for its share of `f` (l2_prefetch.h): pieces of
// kL2PrefetchPiece bytes dealt out a block at a time, so that many SMs' copy engines issue them.
constexpr std::size_t kL2PrefetchPiece = 16 * 1024;
__device__ __forceinline__ void prefetch_l2(const L2Prefetch& f, unsigned part, unsigned parts) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#pragma unroll
  for (int r = 0; r < L2Prefetch::kRanges; ++r) {
    const std::size_t pieces = (f.bytes[r] + kL2PrefetchPiece - 1) / kL2PrefetchPiece;
    for (std::size_t i = part + static_cast<std::size_t>(parts) * threadIdx.x; i < pieces; i += static_cast<std::size_t>(parts) * blockDim.x) {
      const std::size_t at = i * kL2PrefetchPiece;
      const auto n = static_cast<unsigned>(f.bytes[r] - at < kL2PrefetchPiece ? f.bytes[r] - at : kL2PrefetchPiece);
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(static_cast<const char*>(f.p[r]) + at), "r"(n) : "memory");
    }
  }
#else
  (void)f, (void)part, (void)parts;
#endif
}

// Rotary embedding of one pair of a head's vector v (transformers' non-interleaved halves: d and
// d + half), in place, with that position's cos and sin rows. v is read past L1: a launch's last
// block rotates rows other blocks wrote (last_block_done).
__device__ __forceinline__ void rotate_pair(float* v, const float* c, const float* s, int d, int half) {
  const float a = __ldcg(v + d), b = __ldcg(v + d + half);
  v[d] = a * c[d] - b * s[d];
  v[d + half] = b * c[d + half] + a * s[d + half];
}

// One row's RMSNorm by the whole block: out = w ∘ row / sqrt(mean(row²) + eps). rms_norm_kernel's
// body, norm_route_kernel's first part (with as many threads, so that the two sum alike), and the
// latent cache write's (latent_attention.cu).
// shared32: 32 floats of shared memory. The row is read past L1, as a launch's last block must read
// what the others wrote (last_block_done).
__device__ __forceinline__ void rms_norm_row(const float* row, const std::uint16_t* w, int width, float eps, float* out, float* shared32) {
  float ss = 0;
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    const float v = __ldcg(row + i);
    ss += v * v;
  }
  const float scale = rsqrtf(block_sum(ss, shared32) / static_cast<float>(width) + eps);
  for (int i = threadIdx.x; i < width; i += blockDim.x) out[i] = bf16_bits_to_float(w[i]) * (__ldcg(row + i) * scale);
}

// Threads of a block that normalizes a row of `width` (rms_norm_cuda, norm_route_cuda).
inline int rms_norm_threads(int width) { return width >= 1024 ? 1024 : (width >= 256 ? 256 : 64); }

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
inline int launched() { return static_cast<int>(cudaGetLastError()); }
// kernel<<<grid, block, shared, stream>>>(args…), as a programmatic dependent launch where those are
// on (launch.h). Returns the launch's cudaError_t as an int, as launched() does.
template <class... P, class... A>
int launch_kernel(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t shared, cudaStream_t stream, A&&... args) {
  cudaLaunchAttribute programmatic[1];
  programmatic[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  programmatic[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  if (programmatic_launches()) {
    config.attrs = programmatic;
    config.numAttrs = 1;
  }
  const cudaError_t e = cudaLaunchKernelEx(&config, kernel, std::forward<A>(args)...);
  const int last = launched();
  return e != cudaSuccess ? static_cast<int>(e) : last;
}

inline unsigned blocks_for(std::int64_t n, int per_block) { return static_cast<unsigned>((n + per_block - 1) / per_block); }

}  // namespace mosaic::kernels
