// One warp per token: each lane holds experts lane, lane+32, …; max and sum by shuffles, then k
// rounds of a warp-wide argmax that removes the winner.
#include <cuda_runtime.h>

#include <cfloat>

#include "kernels/router_topk.h"

namespace mosaic::kernels {
namespace {

constexpr int kWarp = 32;
constexpr int kPerLane = kRouterMaxExperts / kWarp;

__device__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void router_topk_kernel(const float* __restrict__ logits,  // [tokens, experts]
                                   int tokens, int experts, int k, bool renormalize,
                                   std::int32_t* __restrict__ ids,    // [tokens, k]
                                   float* __restrict__ weights) {     // [tokens, k]
  const int token = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (token >= tokens) return;  // whole warps exit together: tokens map to warps
  const float* row = logits + static_cast<long long>(token) * experts;

  float p[kPerLane];
  float m = -FLT_MAX;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + i * kWarp;
    p[i] = e < experts && !isnan(row[e]) ? row[e] : -FLT_MAX;  // NaN: the lowest value, never a phantom expert
    m = fmaxf(m, p[i]);
  }
  m = warp_max(m);
  float s = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + i * kWarp;
    p[i] = e < experts ? __expf(p[i] - m) : 0.0f;
    s += p[i];
  }
  s = warp_sum(s);

  float chosen = 0;
  for (int j = 0; j < k; ++j) {
    // This lane's best (ties to the lower expert id), then the warp's.
    float best = -1.0f;
    int best_e = experts;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + i * kWarp;
      if (e < experts && (p[i] > best || (p[i] == best && e < best_e))) { best = p[i]; best_e = e; }
    }
    for (int o = kWarp / 2; o > 0; o /= 2) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
      if (ob > best || (ob == best && oe < best_e)) { best = ob; best_e = oe; }
    }
    if (lane == 0) {
      ids[token * k + j] = best_e;
      weights[token * k + j] = best / s;
    }
    chosen += best / s;
    if (best_e < experts && best_e % kWarp == lane) p[best_e / kWarp] = -1.0f;  // out of the running
  }
  if (renormalize && lane == 0)
    for (int j = 0; j < k; ++j) weights[token * k + j] /= chosen;
}

}  // namespace

int router_topk_cuda(const float* logits, int tokens, int experts, int k, bool renormalize, std::int32_t* ids,
                     float* weights, void* stream) {
  if (experts > kRouterMaxExperts || k > experts || k <= 0) return static_cast<int>(cudaErrorInvalidValue);
  if (tokens == 0) return static_cast<int>(cudaSuccess);
  constexpr int kWarpsPerBlock = 4;
  const int blocks = (tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
  router_topk_kernel<<<blocks, kWarpsPerBlock * kWarp, 0, static_cast<cudaStream_t>(stream)>>>(
      logits, tokens, experts, k, renormalize, ids, weights);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace mosaic::kernels
