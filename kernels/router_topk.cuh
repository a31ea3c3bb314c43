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

// DeepSeek's routers (RouterRule, router_topk.h) for one token's row, by one warp: lane holds
// experts lane, lane+32, … with what each weighs if chosen and what choosing ranks; groups ranked by
// a warp reduction each; then k rounds of a warp-wide argmax over the ranks of the kept groups.
__device__ __forceinline__ void choose_of_row(const float* __restrict__ row, int experts, int k, const RouterRule& r, int token,
                                              std::int32_t* __restrict__ ids, float* __restrict__ weights) {
  constexpr int kPerLane = kRouterMaxExperts / kWarp;
  const int lane = threadIdx.x % kWarp;
  // Masked gating: this lane's experts not resident for the token's row, where any of the row is.
  unsigned absent = 0;
  if (r.table) {
    const std::int32_t* entry = r.table + static_cast<long long>(r.rows[token]) * experts;
    int any = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + i * kWarp;
      if (e < experts && entry[e] < 0) absent |= 1u << i;
      any |= e < experts && entry[e] >= 0;
    }
    if (!__any_sync(0xffffffffu, any)) absent = 0;
  }
  float weigh[kPerLane], rank[kPerLane];
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + i * kWarp;
    const float x = e < experts ? (isnan(row[e]) ? -FLT_MAX : row[e]) : -INFINITY;
    rank[i] = x;  // the logit, for now
    if (!((absent >> i) & 1u)) m = fmaxf(m, x);
  }
  if (r.scores == RouterScores::Softmax) {
    m = warp_max(m);
    float s = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      weigh[i] = lane + i * kWarp < experts && !((absent >> i) & 1u) ? expf(rank[i] - m) : 0.0f;
      s += weigh[i];
    }
    s = warp_sum(s);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) rank[i] = weigh[i] /= s;
  } else {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + i * kWarp;
      weigh[i] = 1.0f / (1.0f + expf(-rank[i]));
      rank[i] = e >= experts || ((absent >> i) & 1u) ? -INFINITY : weigh[i] + (r.bias ? r.bias[e] : 0.0f);
    }
  }
  const bool grouped = r.groups != GroupRank::None;
  const int per_group = grouped ? experts / r.n_group : experts;
  if (grouped) {
    // Lane g holds group g's score: its best rank, or the sum of its two best.
    float mine = -INFINITY;
    for (int g = 0; g < r.n_group; ++g) {
      float first = -INFINITY, second = -INFINITY;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int e = lane + i * kWarp;
        if (e >= experts || e / per_group != g) continue;
        if (rank[i] > first) {
          second = first;
          first = rank[i];
        } else if (rank[i] > second) {
          second = rank[i];
        }
      }
      for (int o = kWarp / 2; o > 0; o /= 2) {
        const float of = __shfl_xor_sync(0xffffffffu, first, o), os = __shfl_xor_sync(0xffffffffu, second, o);
        second = fmaxf(fminf(first, of), fmaxf(second, os));
        first = fmaxf(first, of);
      }
      if (lane == g) mine = r.groups == GroupRank::BestScore ? first : first + second;
    }
    // The topk_group best groups (ties to the lower group), as a mask every lane holds.
    unsigned kept = 0;
    bool in_running = lane < r.n_group;
    for (int j = 0; j < r.topk_group; ++j) {
      float best = in_running ? mine : -INFINITY;
      int best_g = in_running ? lane : kWarp;
      for (int o = kWarp / 2; o > 0; o /= 2) {
        const float ob = __shfl_xor_sync(0xffffffffu, best, o);
        const int og = __shfl_xor_sync(0xffffffffu, best_g, o);
        if (og < kWarp && (best_g >= kWarp || ob > best || (ob == best && og < best_g))) {
          best = ob;
          best_g = og;
        }
      }
      kept |= 1u << best_g;
      if (lane == best_g) in_running = false;
    }
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + i * kWarp;
      if (e >= experts || (kept >> (e / per_group)) & 1u) continue;
      if (r.scores == RouterScores::Softmax) rank[i] = weigh[i] = 0.0f;  // V2: out of the pool, at 0
      else rank[i] = -INFINITY;
    }
  }

  unsigned taken = 0;  // this lane's experts already chosen, by i
  float chosen = 0;
  for (int j = 0; j < k; ++j) {
    float best = -INFINITY, best_w = 0;
    int best_e = experts;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + i * kWarp;
      if (e < experts && !((taken >> i) & 1u) && (best_e == experts || rank[i] > best)) {
        best = rank[i];
        best_w = weigh[i];
        best_e = e;
      }
    }
    for (int o = kWarp / 2; o > 0; o /= 2) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o), ow = __shfl_xor_sync(0xffffffffu, best_w, o);
      const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
      if (oe < experts && (best_e == experts || ob > best || (ob == best && oe < best_e))) {
        best = ob;
        best_w = ow;
        best_e = oe;
      }
    }
    if (lane == 0) {
      ids[j] = best_e;
      weights[j] = best_w;
    }
    chosen += best_w;
    if (best_e % kWarp == lane) taken |= 1u << (best_e / kWarp);
  }
  if (lane == 0) {
    if (r.scores == RouterScores::Sigmoid) chosen += 1e-20f;
    for (int j = 0; j < k; ++j) weights[j] = (r.renormalize ? weights[j] / chosen : weights[j]) * r.scale;
  }
}

}  // namespace mosaic::kernels
