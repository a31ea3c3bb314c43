#pragma once
// The router's softmax and top-k for one token's row of logits, by one warp: each lane holds
// experts lane, lane+32, …; max and sum by shuffles, then k rounds of a warp-wide argmax that removes
// the winner. Shared by router_topk.cu and the fused routing in moe_experts.cu.
#include <cfloat>

#include "kernels/kernel_util.cuh"
#include "kernels/router_topk.h"

namespace mosaic::kernels {

__device__ __forceinline__ void topk_of_row(const float* __restrict__ row, int experts, int k, bool renormalize,
                                            std::int32_t* __restrict__ ids, float* __restrict__ weights) {
  constexpr int kPerLane = kRouterMaxExperts / kWarp;
  const int lane = threadIdx.x % kWarp;
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
      ids[j] = best_e;
      weights[j] = best / s;
    }
    chosen += best / s;
    if (best_e < experts && best_e % kWarp == lane) p[best_e / kWarp] = -1.0f;  // out of the running
  }
  if (renormalize && lane == 0)
    for (int j = 0; j < k; ++j) weights[j] /= chosen;
}

}  // namespace mosaic::kernels
