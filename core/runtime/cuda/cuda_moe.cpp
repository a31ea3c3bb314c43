// The CUDA backend's MoE block over every token of a step: each token's router (its resident set's),
// masked gating where the policy asks, fused softmax/top-k, then the routed experts —
//   on the device, when every pair of the layer is sure to hit (or the router is masked): the
//   reroute kernel groups pairs by slot and the grouped kernels run, with no host round trip (with
//   the fusions on, mask, top-k and reroute are one launch — with the post-attention norm and the
//   router too in a decode step of one set — and a lone token's down projection adds its pairs into
//   the residual itself, with no combine);
//   through the host otherwise: the top-k comes back, the routing plan (misses, loads, waves) is made
//   exactly as for the CPU backend, loads go on the copy stream, and each wave's groups run — small
//   ones through the grouped kernels, large ones (prefill) through cuBLAS.
// Under the prefetch policy the next MoE layer's likely experts are loaded meanwhile (cuda_prefetch.cpp).
// Then the weighted combine into the residual, and each set's shared expert.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "kernels/moe_experts.h"
#include "kernels/router_topk.h"
#include "kernels/transformer_ops.h"
#include "runtime/cuda/cublas_library.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/grouped_plan.h"
#include "runtime/expert_importance.h"
#include "runtime/moe_waves.h"

namespace mosaic::cuda {
namespace {

constexpr std::int32_t kLargeGroup = 16;      // pairs: from here a group goes to cuBLAS

}  // namespace

bool CudaBackend::norm_routes(const StepInputs& in) const {
  // One set's rows (one norm and one router), a router one block reads quickly, and pairs for a warp.
  return fused_ && !measures_importance_ && plain_router(spec_) && in.groups.size() == 1 && spec_.num_experts <= kernels::kNormRouteMaxExperts &&
         in.tokens * spec_.top_k <= kernels::kNormRouteMaxPairs;
}

bool CudaBackend::routable_on_device(std::int64_t layer, const StepInputs& in, const MoeState& state) const {
  // The reroute kernel addresses a layer's slots end to end and the grouped kernels read dense
  // matrices only: a layer with delta-only slots, or whose rows reach a slot holding a delta, routes
  // on the host (its bundles run as cpu_experts.cpp runs them).
  if (in.tokens * spec_.top_k > device_route_pairs_ || has_delta_only(layer)) return false;
  const bool masked = state.policy->masks_router();
  const RerouteTable& table = *state.tables[static_cast<std::size_t>(layer)];
  const std::vector<SlotRecord>& slots = records_[static_cast<std::size_t>(layer)];
  for (std::int32_t row : in.distinct_rows)
    for (std::int64_t e = 0; e < spec_.num_experts; ++e) {
      const std::int32_t slot = table.at(row, e);
      if (slot == RerouteTable::kMiss) {
        // A miss needs the host's plan. A masked router picks one only where DeepSeek's kept groups hold
        // too few resident experts, and that pair is dropped, on the device as in the host's plan.
        if (!masked) return false;
      } else if (slots[static_cast<std::size_t>(slot)].has_delta) {
        return false;
      }
    }
  return true;
}

RoutePlan CudaBackend::plan_on_host(std::int64_t layer, const std::int32_t* ids, const StepInputs& in, MoeState& state,
                                    StepResult& result) {
  // In the step's rows (StepInputs keeps the reroute rows as the device reads them, int32).
  const std::vector<std::int64_t> experts(ids, ids + in.tokens * spec_.top_k);
  const std::vector<int> rows(in.rows.begin(), in.rows.end());
  // Traced where a chunk asked, as the CPU backend traces: a layer routed on the device is traced
  // when its plan is replayed after the step (cuda_step.cpp).
  return plan_moe_layer(layer, experts, spec_.top_k, {rows, in.sequence, in.first, in.traced, in.any_traced}, state, result);
}

void CudaBackend::run_grouped(const kernels::GroupedPairs& g, int max_groups, bool tensor_cores) {
  const int H = static_cast<int>(spec_.hidden_size), I = static_cast<int>(spec_.expert_intermediate);
  if (tensor_cores) {
    MOSAIC_CUDA_CHECK(kernels::expert_gate_up_tc_cuda(work_.h, H, I, static_cast<int>(spec_.top_k), g, max_groups, work_.act, stream_));
    MOSAIC_CUDA_CHECK(kernels::expert_down_tc_cuda(work_.act, H, I, g, max_groups, work_.pair_out, stream_));
    return;
  }
  MOSAIC_CUDA_CHECK(kernels::expert_gate_up_cuda(work_.h, H, I, static_cast<int>(spec_.top_k), g, max_groups, work_.act, stream_));
  MOSAIC_CUDA_CHECK(kernels::expert_down_cuda(work_.act, H, I, g, max_groups, work_.pair_out, stream_));
}

void CudaBackend::cublas_experts(std::int64_t layer, const bf16_t* wt, std::int32_t begin, std::int32_t end, std::span<const PlannedGroup> deltas) {
  const std::int64_t H = spec_.hidden_size, I = spec_.expert_intermediate, k = spec_.top_k;
  Workspace& w = work_;
  const int n = end - begin;
  float* gu = w.act + static_cast<std::int64_t>(begin) * 2 * I;  // [n, 2I], then [n, I] of activations in place
  const std::int32_t* pairs = w.groups.pair_at + begin;
  const bool any_delta = std::any_of(deltas.begin(), deltas.end(), [](const PlannedGroup& g) { return g.delta; });
  if (any_delta) {
    // A delta reads the activations in fp32, as the CPU's does; cuBLAS reads their bf16 copy.
    float* x = w.gathered + static_cast<std::int64_t>(begin) * H;
    MOSAIC_CUDA_CHECK(kernels::gather_rows_cuda(w.h, static_cast<int>(H), pairs, n, static_cast<int>(k), x, stream_));
    MOSAIC_CUDA_CHECK(kernels::float_to_bf16_cuda(x, n * H, w.narrow, stream_));
  } else {
    MOSAIC_CUDA_CHECK(kernels::gather_rows_bf16_cuda(w.h, static_cast<int>(H), pairs, n, static_cast<int>(k), w.narrow, stream_));
  }
  // Each delta group's own rows of an output, its Δ added over the base's product there.
  auto add_deltas = [&](int part, const float* x, std::int64_t x_width, std::int64_t x_first, float* y, std::int64_t ldy, std::int64_t y_col) {
    for (const PlannedGroup& g : deltas) {
      if (!g.delta) continue;
      const SlotRecord& r = record(layer, g.slot);
      if (!r.has_delta) throw std::logic_error("a delta group planned over a slot that holds no delta");
      MOSAIC_CUDA_CHECK(kernels::delta_linear_cuda(x + (g.begin - x_first) * x_width, g.end - g.begin, r.delta[static_cast<std::size_t>(part)],
                                                   /*accumulate=*/true, y + g.begin * ldy + y_col, ldy, stream_));
    }
  };
  const float alpha = 1.0f, beta = 0.0f;
  MOSAIC_CUDA_CHECK(cublas().gemm_ex(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(2 * I), n, static_cast<int>(H), &alpha, wt, CUDA_R_16BF,
                                     static_cast<int>(H), w.narrow, CUDA_R_16BF, static_cast<int>(H), &beta, gu, CUDA_R_32F,
                                     static_cast<int>(2 * I), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (any_delta) {
    add_deltas(0, w.gathered, H, 0, w.act, 2 * I, 0);  // gate
    add_deltas(1, w.gathered, H, 0, w.act, 2 * I, I);  // up
  }
  MOSAIC_CUDA_CHECK(kernels::silu_mul_cuda(gu, nullptr, n, static_cast<int>(I), w.mlp2, stream_));
  MOSAIC_CUDA_CHECK(kernels::float_to_bf16_cuda(w.mlp2, static_cast<std::int64_t>(n) * I, w.narrow, stream_));
  MOSAIC_CUDA_CHECK(cublas().gemm_ex(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(H), n, static_cast<int>(I), &alpha, wt + 2 * I * H,
                                     CUDA_R_16BF, static_cast<int>(I), w.narrow, CUDA_R_16BF, static_cast<int>(I), &beta,
                                     w.pair_out + static_cast<std::int64_t>(begin) * H, CUDA_R_32F, static_cast<int>(H),
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (any_delta) add_deltas(2, w.mlp2, I, begin, w.pair_out, H, 0);  // down: mlp2 holds the bundle's rows from 0
}

void CudaBackend::moe(std::int64_t layer, const StepInputs& in, MoeState& state, StepResult& result, bool on_device, bool project) {
  const ModelSpec& s = spec_;
  const auto l = static_cast<std::size_t>(layer);
  const LayerOffsets& L = layout_.layers[l];
  const std::int64_t T = in.tokens, k = s.top_k, E = s.num_experts, H = s.hidden_size, P = T * k;
  Workspace& w = work_;
  const std::int32_t* table = tables_[l].get<std::int32_t>();
  std::int32_t* ids = w.topk_ids + layer * P;

  const auto slots = static_cast<int>(shape_.layer_slots[l]);
  // The fused launches (route_cuda, norm_route_cuda) route and group in one; DeepSeek's routers choose
  // in choose_experts and group in reroute_cuda.
  const bool fused_route = fused_ && plain_router(s);
  // The router's logits, its top-k and (on the device) the groups. Before predict, which reuses w.router.
  const bool masks = state.policy->masks_router();
  if (on_device && norm_routes(in)) {  // the post-attention norm too (forward() left it): one launch
    const int b = in.groups.front().buffer;
    const kernels::NormRouter nr{weight(b, L.post_norm), static_cast<float>(s.rms_norm_eps), weight(b, L.router), static_cast<int>(H)};
    if (project) {
      const kernels::Projection wo{w.attn, static_cast<int>(s.o_width()), weight(b, L.wo), weight(b, L.bo), tail_counter(1)};
      MOSAIC_CUDA_CHECK(kernels::norm_route_cuda(w.x, wo, nr, w.h, w.router, masks, s.norm_topk_prob, ids, w.topk_w, in.device.rows,
                                                 static_cast<int>(T), static_cast<int>(k), table, static_cast<int>(E), layer_slots(l),
                                                 slot_elements_, w.groups, stream_));
    } else {
      MOSAIC_CUDA_CHECK(kernels::norm_route_cuda(w.x, nr, w.h, w.router, masks, s.norm_topk_prob, ids, w.topk_w, in.device.rows,
                                                 static_cast<int>(T), static_cast<int>(k), table, static_cast<int>(E), layer_slots(l),
                                                 slot_elements_, w.groups, stream_));
    }
  } else {
    for (const TokenGroup& g : in.groups)
      linear(w.h + g.begin * H, g.end - g.begin, H, weight(g.buffer, L.router), E, nullptr, false, w.router + g.begin * E);
    if (measures_importance_) add_importance(layer, in);  // before the routing masks w.router
    if (fused_route && on_device) {
      MOSAIC_CUDA_CHECK(kernels::route_cuda(w.router, masks, s.norm_topk_prob, ids, w.topk_w, in.device.rows, static_cast<int>(T),
                                            static_cast<int>(k), table, static_cast<int>(E), slots, layer_slots(l), slot_elements_,
                                            w.reroute_scratch, w.groups, stream_));
    } else {
      choose_experts(layer, in, masks, ids, w.topk_w);
    }
  }

  // The prefetch policy predicts the next MoE layer's experts here, unless every pair there hits anyway.
  std::int64_t next = state.policy->prefetches() ? state.next_moe_layer(layer) : -1;
  if (next >= 0 && routable_on_device(next, in, state)) next = -1;
  if (next >= 0 && state.gate && !state.gate->wanted(next)) next = -1;  // its predictions have not paid lately
  if (next >= 0) predict(next, in);

  bool combined = false;
  if (on_device) {
    await_prefetch(layer, in, result, /*host_waited=*/false);  // before this layer's own prefetch replaces it
    if (next >= 0) {
      MOSAIC_CUDA_CHECK(cudaStreamSynchronize(stream_));  // for the predicted ids
      prefetch(next, in, state, result);
    }
    if (!fused_route)
      MOSAIC_CUDA_CHECK(kernels::reroute_cuda(ids, in.device.rows, static_cast<int>(T), static_cast<int>(k), table, static_cast<int>(E),
                                              slots, layer_slots(l), slot_elements_, w.reroute_scratch, w.groups, stream_));
    const int max_groups = static_cast<int>(std::min<std::int64_t>(P, slots));
    if (fused_ && T == 1) {  // one token: its pairs' outputs summed as they are made
      const int I = static_cast<int>(s.expert_intermediate);
      MOSAIC_CUDA_CHECK(kernels::expert_gate_up_cuda(w.h, static_cast<int>(H), I, static_cast<int>(k), w.groups, max_groups, w.act, stream_));
      MOSAIC_CUDA_CHECK(kernels::expert_down_combine_cuda(w.act, static_cast<int>(H), I, static_cast<int>(k), w.groups, w.topk_w, w.x, stream_,
                                                          ahead_of_qkv(layer + 1, in.groups.front().buffer)));
      combined = true;
    } else {
      run_grouped(w.groups, max_groups, tensor_core_experts_);
    }
    routed_on_device_[l] = true;
  } else {
    route_on_host(layer, in, state, result, next);
  }
  if (!combined)
    MOSAIC_CUDA_CHECK(kernels::moe_combine_cuda(w.pair_out, w.groups.pos_of, w.topk_w, static_cast<int>(T), static_cast<int>(k),
                                                static_cast<int>(H), w.x, stream_));

  if (L.mlp_gate < 0) return;  // no shared expert
  const std::int64_t Is = s.shared_expert_intermediate;
  for (const TokenGroup& g : in.groups) {
    const std::int64_t n = g.end - g.begin;
    const float* h = w.h + g.begin * H;
    if (L.shared_gate < 0) {  // DeepSeek: added as they are
      swiglu(g.buffer, L, Is, h, n, true, w.x + g.begin * H);
      continue;
    }
    swiglu(g.buffer, L, Is, h, n, false, w.pair_out);  // pair_out is free after the combine
    linear(h, n, H, weight(g.buffer, L.shared_gate), 1, nullptr, false, w.gate);
    MOSAIC_CUDA_CHECK(kernels::add_gated_cuda(w.x + g.begin * H, w.pair_out, w.gate, static_cast<int>(n), static_cast<int>(H), stream_));
  }
}

void CudaBackend::choose_experts(std::int64_t layer, const StepInputs& in, bool masks, std::int32_t* ids, float* weights) {
  const ModelSpec& s = spec_;
  const auto l = static_cast<std::size_t>(layer);
  const int T = static_cast<int>(in.tokens), E = static_cast<int>(s.num_experts), k = static_cast<int>(s.top_k);
  Workspace& w = work_;
  const std::int32_t* table = tables_[l].get<std::int32_t>();
  if (plain_router(s)) {
    if (masks) MOSAIC_CUDA_CHECK(kernels::mask_router_cuda(w.router, in.device.rows, table, T, E, stream_));
    MOSAIC_CUDA_CHECK(kernels::router_topk_cuda(w.router, T, E, k, s.norm_topk_prob, ids, weights, stream_));
    return;
  }
  // DeepSeek's routers mask inside the choice: a masked sigmoid expert still weighs its own score
  // where too few resident ones leave it chosen (its pair is then dropped), as route_tokens weighs it.
  const std::int64_t bias = layout_.layers[l].router_bias;
  auto rule = [&](int buffer, std::int64_t first) {
    kernels::RouterRule r = router_rule(s, bias < 0 ? nullptr : weight_fp32(buffer, bias));
    if (masks) {
      r.table = table;
      r.rows = in.device.rows + first;
    }
    return r;
  };
  if (bias < 0) {
    MOSAIC_CUDA_CHECK(kernels::router_choice_cuda(w.router, T, E, k, rule(0, 0), ids, weights, stream_));
    return;
  }
  // The correction bias is each resident set's own.
  for (const TokenGroup& g : in.groups)
    MOSAIC_CUDA_CHECK(kernels::router_choice_cuda(w.router + g.begin * E, static_cast<int>(g.end - g.begin), E, k, rule(g.buffer, g.begin),
                                                  ids + g.begin * k, weights + g.begin * k, stream_));
}

void CudaBackend::add_importance(std::int64_t layer, const StepInputs& in) {
  const ModelSpec& s = spec_;
  Workspace& w = work_;
  choose_experts(layer, in, /*masks=*/false, w.unmasked_ids, w.unmasked_w);
  float* scores = importance_.get<float>() + layer * store_.targets() * s.num_experts;
  MOSAIC_CUDA_CHECK(kernels::importance_add_cuda(w.h, static_cast<int>(s.hidden_size), static_cast<int>(in.tokens), static_cast<int>(s.top_k),
                                                 w.unmasked_ids, w.unmasked_w, in.device.rows, static_cast<int>(s.num_experts), scores, stream_));
}

void CudaBackend::read_importance(MoeState& state) const {
  const ModelSpec& s = spec_;
  const float* sums = importance_host_.get<float>();
  const int targets = store_.targets();
  for (std::int64_t l = 0; l < s.num_layers; ++l)
    for (int r = 0; r < targets; ++r)
      for (std::int64_t e = 0; e < s.num_experts; ++e)
        if (const float v = sums[(l * targets + r) * s.num_experts + e]; v != 0.0f) state.importance->add(l, r, e, v, 1.0);
}

void CudaBackend::route_on_host(std::int64_t layer, const StepInputs& in, MoeState& state, StepResult& result, std::int64_t next) {
  const ModelSpec& s = spec_;
  const std::int64_t T = in.tokens, k = s.top_k, P = T * k;
  Workspace& w = work_;

  std::int32_t* ids_host = ids_host_.get<std::int32_t>() + layer * P;
  MOSAIC_CUDA_CHECK(cudaMemcpyAsync(ids_host, w.topk_ids + layer * P, static_cast<std::size_t>(P) * sizeof(std::int32_t),
                                    cudaMemcpyDeviceToHost, stream_));
  MOSAIC_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const RoutePlan plan = plan_on_host(layer, ids_host, in, state, result);
  await_prefetch(layer, in, result, /*host_waited=*/true);
  // With delta folders in the family, groups over the same base matrices bundle where a delta is
  // among them: what a slot serves is what this step loaded into it last, else what it holds.
  ServesOf serves;
  if (store_.deltas() > 0)
    serves = [&](SlotRef slot, std::int32_t loaded) {
      const ExpertId id = loaded >= 0 ? loaded : record(layer, slot).expert;
      if (id < 0) throw std::logic_error("a routing plan groups pairs on a slot that holds no expert");
      const HostExpert& e = store_.expert_tensors(id);
      return SlotServes{{e.gate, e.up, e.down}, e.delta >= 0};
    };
  const GroupedPlan gp = grouped_plan(plan, kLargeGroup, serves);

  // The plan's arrays in one upload: pair_at, pos_of, per wave the count of small groups, and the
  // small groups' begin, end and weights, wave after wave.
  std::byte* host = plan_host_.get<std::byte>();
  std::size_t at = 0;
  auto put = [&](const void* src, std::size_t bytes) {
    std::memcpy(host + at, src, bytes);
    const std::size_t here = at;
    at += bytes;
    return here;
  };
  std::vector<std::int32_t> counts, begins, ends;
  std::vector<const bf16_t*> weights;
  for (const PlannedWave& wave : gp.waves) {
    counts.push_back(static_cast<std::int32_t>(wave.small.size()));
    for (const PlannedGroup& g : wave.small) {
      begins.push_back(g.begin);
      ends.push_back(g.end);
      weights.push_back(dense_weights(layer, g.slot));
    }
  }
  const std::size_t n_pos = gp.pair_at.size(), n_groups = begins.size();
  const std::size_t o_pair_at = put(gp.pair_at.data(), n_pos * 4), o_pos_of = put(gp.pos_of.data(), static_cast<std::size_t>(P) * 4);
  const std::size_t o_counts = put(counts.data(), counts.size() * 4), o_begin = put(begins.data(), n_groups * 4);
  const std::size_t o_end = put(ends.data(), n_groups * 4), o_weights = put(weights.data(), n_groups * sizeof(void*));
  auto upload = [&](void* to, std::size_t from, std::size_t bytes) {
    if (bytes) MOSAIC_CUDA_CHECK(cudaMemcpyAsync(to, host + from, bytes, cudaMemcpyHostToDevice, stream_));
  };
  upload(w.groups.pair_at, o_pair_at, n_pos * 4);
  upload(w.groups.pos_of, o_pos_of, static_cast<std::size_t>(P) * 4);
  upload(w.group_counts, o_counts, counts.size() * 4);
  upload(w.groups.begin, o_begin, n_groups * 4);
  upload(w.groups.end, o_end, n_groups * 4);
  upload(w.groups.weights, o_weights, n_groups * sizeof(void*));

  std::size_t first_group = 0;
  run_waves(
      layer, plan, k, in.sequence, state, result,
      [&](std::span<const ExpertLoad> loads) {
        // Scratch slots of the wave before may still be read: the copies start after its compute.
        MOSAIC_CUDA_CHECK(cudaEventRecord(computed_, stream_));
        MOSAIC_CUDA_CHECK(cudaStreamWaitEvent(copy_, computed_, 0));
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<TierRead> bytes;
        for (const ExpertLoad& load : loads) bytes.push_back(issue_expert_copy(layer, load.slot, load.content));
        MOSAIC_CUDA_CHECK(cudaStreamSynchronize(copy_));
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        copies_done();
        std::vector<std::pair<TierRead, double>> done;  // the wave's copies overlap: each is charged an equal share
        for (const TierRead& read : bytes) done.emplace_back(read, seconds / static_cast<double>(loads.size()));
        return done;
      },
      [&](const RouteWave&, std::size_t wi) {
        const PlannedWave& wave = gp.waves[wi];
        if (!wave.small.empty()) {
          kernels::GroupedPairs g = w.groups;
          g.groups = w.group_counts + wi;
          g.begin += first_group;
          g.end += first_group;
          g.weights += first_group;
          run_grouped(g, static_cast<int>(wave.small.size()), /*tensor_cores=*/false);  // small groups: their large ones go to cuBLAS
          first_group += wave.small.size();
        }
        for (const PlannedGroup& g : wave.large) cublas_experts(layer, dense_weights(layer, g.slot), g.begin, g.end, {});
        for (const PlannedBundle& b : wave.bundles) cublas_experts(layer, dense_weights(layer, b.groups.front().slot), b.begin, b.end, b.groups);
      });
  // After this layer's own loads, so that they do not queue behind the next layer's.
  if (next >= 0) prefetch(next, in, state, result);
  // The plan's host arrays are read by the copies above; the next layer may overwrite them.
  MOSAIC_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace mosaic::cuda
