// The CPU backend's MoE step over every token of a step: each token's router (its resident set's),
// top-k, the routing plan (reroute table, misses through the miss policy, loads), then each slot's
// expert over the tokens routed to it, weighted and summed; plus each set's shared expert.
#include <chrono>
#include <limits>

#include "runtime/cpu_backend.h"
#include "runtime/cpu_ops.h"
#include "runtime/cpu_rows.h"
#include "runtime/expert_importance.h"
#include "runtime/moe_waves.h"

namespace mosaic::cpu {

at::Tensor CpuBackend::moe(std::int64_t layer, const at::Tensor& h, const StepLayout& layout, MoeState& state,
                           StepResult& result) {
  const ModelSpec& s = store_->spec();
  const std::int64_t N = layout.tokens, k = s.top_k, E = s.num_experts;
  const auto l = static_cast<std::size_t>(layer);
  RerouteTable& table = *state.tables[l];

  // Router probabilities per resident-set group, top-k over all tokens.
  std::vector<std::int64_t> top_i(static_cast<std::size_t>(N * k));
  std::vector<float> top_w(static_cast<std::size_t>(N * k));
  for (const auto& g : layout.groups) {
    const std::int64_t n = g.end - g.begin;
    const at::Tensor hg = h.narrow(0, g.begin, n);
    const LayerWeights& L = weights(g.buffer).layers[l];
    const at::Tensor logits = project(hg, L.router);  // [n, E]
    if (state.importance) {
      // SwapMoE's importance, from the choices the tokens would make with every expert resident.
      std::vector<std::int64_t> ip(static_cast<std::size_t>(n * k));
      std::vector<float> wp(ip.size());
      route_rows(s, logits, L.router_bias, {}, ip.data(), wp.data());  // [n, k]
      const at::Tensor norms = hg.norm(2, {1}).contiguous();  // [n]
      const float* np = norms.data_ptr<float>();
      for (std::int64_t t = 0; t < n; ++t)
        for (std::int64_t j = 0; j < k; ++j)
          state.importance->add(layer, layout.row[static_cast<std::size_t>(g.begin + t)], ip[static_cast<std::size_t>(t * k + j)], np[t],
                                  wp[static_cast<std::size_t>(t * k + j)]);
    }
    at::Tensor absent;
    if (state.policy->masks_router()) {
      // SwapMoE's masked gating: experts with no slot for the token's row take no probability. A
      // token whose row has no expert resident in this layer keeps uniform logits; its pairs are dropped.
      absent = at::zeros({n, E}, at::kBool);
      auto* a = absent.data_ptr<bool>();
      for (std::int64_t t = 0; t < n; ++t) {
        const int row = layout.row[static_cast<std::size_t>(g.begin + t)];
        bool any = false;
        for (std::int64_t e = 0; e < E; ++e) any |= !(a[t * E + e] = table.at(row, e) == RerouteTable::kMiss);
        if (!any)
          for (std::int64_t e = 0; e < E; ++e) a[t * E + e] = false;
      }
    }
    route_rows(s, logits, L.router_bias, absent, top_i.data() + g.begin * k, top_w.data() + g.begin * k);  // [n, k]
  }

  at::Tensor out = at::zeros_like(h);
  run_moe_waves(
      layer, top_i, k, layout, state, result,
      [&](const ExpertLoad& load) {
        const auto t0 = std::chrono::steady_clock::now();
        const TierRead read = load_expert(layer, load.slot, load.content);
        return std::pair{read, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
      },
      [&](const RouteWave& wave, std::size_t) { run_groups(layer, wave, h, top_w, k, out); });

  if (state.policy->prefetches()) {
    const std::int64_t next = state.next_moe_layer(layer);
    if (next >= 0 && (!state.gate || state.gate->wanted(next))) prefetch(layer, h, layout, state, result);
  }

  for (const auto& g : layout.groups) {
    const LayerWeights& L = weights(g.buffer).layers[l];
    if (!L.shared.defined()) continue;
    const at::Tensor hg = h.narrow(0, g.begin, g.end - g.begin);
    const at::Tensor shared = swiglu(hg, L.shared, true);
    // Qwen2-MoE's shared expert through its sigmoid gate; DeepSeek's shared experts as they are.
    out.narrow(0, g.begin, g.end - g.begin).add_(L.shared_gate.defined() ? at::sigmoid(project(hg, L.shared_gate)) * shared : shared);
  }
  return out;
}

void CpuBackend::prefetch(std::int64_t layer, const at::Tensor& h, const StepLayout& layout, MoeState& state, StepResult& result) {
  const std::int64_t next = state.next_moe_layer(layer);
  if (next < 0) return;
  const auto n = static_cast<std::size_t>(next);
  const std::int64_t k = store_->spec().top_k;
  std::vector<std::int64_t> predicted(static_cast<std::size_t>(layout.tokens * k));
  for (const auto& g : layout.groups) {
    const LayerWeights& L = weights(g.buffer).layers[n];
    std::vector<float> unused(static_cast<std::size_t>((g.end - g.begin) * k));
    route_rows(store_->spec(), project(h.narrow(0, g.begin, g.end - g.begin), L.router), L.router_bias, {}, predicted.data() + g.begin * k,
               unused.data());
  }
  const LayerSlots slots{next, *state.tables[n], *state.pools[n], *state.scratch, *state.store, *state.policy, state.recent};
  for (const ExpertLoad& load : plan_prefetch(slots, predicted, k, layout.row)) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::uint64_t bytes = load_expert(next, load.slot, load.content).bytes;
    LayerCounts& c = result.counts[static_cast<std::size_t>(layout.sequence[static_cast<std::size_t>(load.pair / k)])][n];
    ++c.prefetches;
    c.prefetch_bytes += bytes;
    c.prefetch_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
}

}  // namespace mosaic::cpu
