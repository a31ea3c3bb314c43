#include "runtime/cuda/kernel_timing.h"

#include <algorithm>
#include <cstddef>

#include "common/error.h"
#include "kernels/linear.h"
#include "kernels/moe_experts.h"
#include "kernels/paged_attention.h"
#include "kernels/router_topk.h"
#include "kernels/transformer_ops.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_probe.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/launch_timer.h"

namespace mosaic::cuda {
namespace {

using kernels::bf16_t;
using namespace launch_timing;

constexpr int kBlockTokens = 16;

// One sequence at `context` − 1, its blocks in order.
struct OneSequence {
  explicit OneSequence(int context) {
    std::vector<std::int32_t> list(static_cast<std::size_t>((context + kBlockTokens - 1) / kBlockTokens));
    for (std::size_t b = 0; b < list.size(); ++b) list[b] = static_cast<std::int32_t>(b);
    position = upload(std::vector<std::int32_t>{context - 1});
    offset = zeros(sizeof(std::int32_t));
    blocks = upload(list);
    cache_rows = list.size() * kBlockTokens;
  }
  kernels::PagedQueries queries() const { return {position.get<std::int32_t>(), offset.get<std::int32_t>(), blocks.get<std::int32_t>(), kBlockTokens}; }
  DeviceBuffer position, offset, blocks;
  std::size_t cache_rows = 0;
};

}  // namespace

std::vector<KernelTime> time_decode_kernels(const ModelSpec& s, int context, bool fused, TimingRounds rounds) {
  if (const auto why = unavailable()) throw DeviceError("device cuda", "", *why);
  if (s.mla || !plain_router(s))  // the table times a Mixtral-like step's kernels, as bench-cuda's family has them
    throw UnsupportedError("kernel timing", std::string(s.model_type()), "times grouped-query attention and a softmax top-k router only",
                           "time DeepSeek's step as a whole (bench-cuda's decode rows)");
  if (context < 1 || context > kGraphPositions)
    throw InvalidArgument("kernel timing", "context", "is " + std::to_string(context),
                          "give 1 … " + std::to_string(kGraphPositions) + " positions, as a decode graph takes");
  const int H = static_cast<int>(s.hidden_size), Q = static_cast<int>(s.q_width()), KV = static_cast<int>(s.kv_width());
  const int I = static_cast<int>(s.expert_intermediate), E = static_cast<int>(s.num_experts), K = static_cast<int>(s.top_k);
  const int V = static_cast<int>(s.vocab_size), nh = static_cast<int>(s.num_heads), kvh = static_cast<int>(s.num_kv_heads);
  const int hd = static_cast<int>(s.head_dim), L = static_cast<int>(s.num_layers), Ls = static_cast<int>(s.num_sparse_layers());
  const auto eps = static_cast<float>(s.rms_norm_eps);
  auto weights = [](std::int64_t rows, std::int64_t cols) { return static_cast<std::size_t>(rows * cols) * sizeof(bf16_t); };
  const std::size_t expert = 3 * weights(I, H);  // gate_up [2I, H], then down [H, I], as a slot holds it

  Timer timer(rounds);
  const cudaStream_t st = timer.stream();
  // The attention's shared-memory attributes are set on its first call, which must not be captured.
  MOSAIC_CUDA_CHECK(kernels::paged_attention_cuda(nullptr, {}, 0, 1, 1, 1, 1, nullptr, nullptr, nullptr, false, st));
  const Arena arena(std::max({kMinArena, 2 * weights(V, H), 2 * std::size_t(K) * expert}));

  // Activations, fp32, zeroed; the step's small integer inputs.
  DeviceBuffer x = zeros(4 * std::size_t(H)), h = zeros(4 * std::size_t(H)), q = zeros(4 * std::size_t(Q)), attn = zeros(4 * std::size_t(Q));
  DeviceBuffer k = zeros(4 * std::size_t(KV)), v = zeros(4 * std::size_t(KV)), router = zeros(4 * std::size_t(E));
  DeviceBuffer topk_w = zeros(4 * std::size_t(K)), act = zeros(4 * std::size_t(K) * I), pair_out = zeros(4 * std::size_t(K) * H);
  DeviceBuffer logits = zeros(4 * std::size_t(V)), cos = zeros(4 * std::size_t(hd)), sin = zeros(4 * std::size_t(hd));
  std::vector<std::int32_t> firsts(static_cast<std::size_t>(K)), slot_table(static_cast<std::size_t>(E)), ends(static_cast<std::size_t>(K));
  for (int j = 0; j < K; ++j) {
    firsts[static_cast<std::size_t>(j)] = j;
    ends[static_cast<std::size_t>(j)] = j + 1;
  }
  for (int e = 0; e < E; ++e) slot_table[static_cast<std::size_t>(e)] = e;  // every expert resident, slot e
  DeviceBuffer ids = upload(firsts), table = upload(slot_table), zero_int = zeros(sizeof(std::int32_t));
  DeviceBuffer scratch = zeros(2 * std::size_t(E) * sizeof(int));

  const OneSequence one(context);
  const kernels::PagedQueries pq = one.queries();
  const std::size_t cache_bytes = one.cache_rows * weights(1, KV);
  DeviceBuffer kc = zeros(cache_bytes), vc = zeros(cache_bytes);  // what the cache write writes

  // The grouped experts' pairs: one token's K experts, a group each. Launch i reads the K experts of
  // arena copy i; reroute writes its own groups, apart.
  std::vector<const bf16_t*> expert_weights;
  for (int i = 0; i < kLaunches; ++i)
    for (int j = 0; j < K; ++j) expert_weights.push_back(arena.copy(i, K * expert) + j * (expert / sizeof(bf16_t)));
  DeviceBuffer group_count = upload(std::vector<int>{K}), begins = upload(firsts), group_ends = upload(ends);
  DeviceBuffer pair_at = upload(firsts), pos_of = upload(firsts), expert_ptrs = upload(expert_weights);
  auto pairs_of = [&](int launch) {
    kernels::GroupedPairs g;
    g.groups = group_count.get<int>();
    g.begin = begins.get<int>();
    g.end = group_ends.get<int>();
    g.weights = expert_ptrs.get<const bf16_t*>() + launch * K;
    g.pair_at = pair_at.get<std::int32_t>();
    g.pos_of = pos_of.get<std::int32_t>();
    return g;
  };
  DeviceBuffer r_groups = zeros(sizeof(int)), r_begin = zeros(E * sizeof(int)), r_end = zeros(E * sizeof(int));
  DeviceBuffer r_weights = zeros(E * sizeof(void*)), r_pair_at = zeros(K * sizeof(int)), r_pos_of = zeros(K * sizeof(int)), r_misses = zeros(sizeof(int));
  const kernels::GroupedPairs rerouted{r_groups.get<int>(), r_begin.get<int>(), r_end.get<int>(), r_weights.get<const bf16_t*>(),
                                       r_pair_at.get<std::int32_t>(), r_pos_of.get<std::int32_t>(), r_misses.get<int>()};

  std::vector<KernelTime> out;
  auto measure = [&](std::string name, int per_token, std::size_t bytes, auto&& enqueue) {
    out.push_back({std::move(name), per_token, timer.per_launch(enqueue), double(bytes)});
  };
  measure("embedding row", 1, weights(1, H), [&](int i) {
    return kernels::embed_rows_cuda(arena.copy(i, weights(V, H)), ids.get<std::int32_t>(), 1, H, x.get<float>(), st);
  });
  // Fused, as the backend's step makes them: each layer's input norm is folded into its q, k and v
  // projections, and a MoE layer's post-attention norm is in its routing launch (norm_route_cuda)
  // where the router is small enough for one block.
  const bool norm_routed = fused && E <= kernels::kNormRouteMaxExperts && K <= kernels::kNormRouteMaxPairs;
  // The final norm too, folded into the head (a decode step's one row, read where it is).
  const int norms = fused ? (norm_routed ? L - Ls : L) : 2 * L + 1;
  if (norms > 0)
    measure("RMSNorm", norms, weights(1, H), [&](int i) {
      return kernels::rms_norm_cuda(x.get<float>(), arena.copy(i, weights(1, H)), 1, H, eps, h.get<float>(), st);
    });
  // The launches that end in their last block's work (last_block_done) count on these, left zero.
  const DeviceBuffer counters = zeros(2 * sizeof(unsigned));
  MOSAIC_CUDA_CHECK(cudaDeviceSynchronize());  // zeroed before the timer's stream (non-blocking) reads them
  if (fused) {
    // The rotary embedding and the cache write in the same launch (and q/k norms, where the
    // architecture has them, which this table leaves out either way).
    measure("norm, q/k/v, rotary, KV", L, weights(Q + 2 * std::int64_t(KV) + 1, H), [&](int i) {
      const bf16_t* w = arena.copy(i, weights(Q + 2 * std::int64_t(KV) + 1, H));
      const kernels::LinearPart parts[] = {{w, Q, nullptr, q.get<float>()},
                                           {w + std::size_t(Q) * H, KV, nullptr, k.get<float>()},
                                           {w + std::size_t(Q + KV) * H, KV, nullptr, v.get<float>()}};
      const kernels::RotaryWrite rotary{cos.get<float>(), sin.get<float>(), pq, nh, kvh, hd, kc.get<bf16_t>(), vc.get<bf16_t>(),
                                        counters.get<unsigned>()};
      return kernels::linear_parts_cuda(x.get<float>(), 1, H, parts, 3, st, {w + std::size_t(Q + 2 * KV) * H, eps}, rotary);
    });
  } else {
    measure("q projection", L, weights(Q, H), [&](int i) {
      return kernels::linear_cuda(h.get<float>(), 1, H, arena.copy(i, weights(Q, H)), Q, nullptr, false, q.get<float>(), st);
    });
    measure("k projection", L, weights(KV, H), [&](int i) {
      return kernels::linear_cuda(h.get<float>(), 1, H, arena.copy(i, weights(KV, H)), KV, nullptr, false, k.get<float>(), st);
    });
    measure("v projection", L, weights(KV, H), [&](int i) {
      return kernels::linear_cuda(h.get<float>(), 1, H, arena.copy(i, weights(KV, H)), KV, nullptr, false, v.get<float>(), st);
    });
    measure("rotary, q", L, 0, [&](int) { return kernels::rope_cuda(q.get<float>(), cos.get<float>(), sin.get<float>(), 1, nh, hd, st); });
    measure("rotary, k", L, 0, [&](int) { return kernels::rope_cuda(k.get<float>(), cos.get<float>(), sin.get<float>(), 1, kvh, hd, st); });
    measure("KV cache write", L, 0, [&](int) {
      return kernels::kv_write_cuda(k.get<float>(), v.get<float>(), pq, 1, kvh, hd, kc.get<bf16_t>(), vc.get<bf16_t>(), st);
    });
  }
  // The attention reads its keys and values from the arena too: in a step, a layer's cache rows are
  // read after gigabytes of weights have passed through the L2.
  // Fused: split over positions as the backend's step does (its counters zeroed, as it leaves them).
  const DeviceBuffer split_scratch = zeros(kernels::attention_split_bytes(hd));
  const kernels::AttentionSplit split = fused ? kernels::AttentionSplit{split_scratch.get(), split_scratch.bytes()} : kernels::AttentionSplit{};
  MOSAIC_CUDA_CHECK(cudaDeviceSynchronize());  // the counters zeroed before the timer's stream (non-blocking) reads them
  measure("attention", L, 2 * std::size_t(context) * weights(1, KV), [&](int i) {
    const bf16_t* keys = arena.copy(i, 2 * cache_bytes);
    return kernels::paged_attention_cuda(q.get<float>(), pq, 1, nh, kvh, hd, kGraphPositions, keys, keys + cache_bytes / sizeof(bf16_t),
                                         attn.get<float>(), false, st, split);
  });
  // A MoE layer's output projection is in its routing launch where that normalizes and routes.
  if (!norm_routed || L > Ls)
    measure("output projection", norm_routed ? L - Ls : L, weights(H, Q), [&](int i) {
      return kernels::linear_cuda(attn.get<float>(), 1, Q, arena.copy(i, weights(H, Q)), H, nullptr, true, x.get<float>(), st);
    });
  if (norm_routed) {
    measure("out proj, norm, route", Ls, weights(H, Q) + weights(E + 1, H), [&](int i) {
      const bf16_t* w = arena.copy(i, weights(H, Q) + weights(E + 1, H));
      const bf16_t* n = w + std::size_t(H) * Q;
      const kernels::Projection wo{attn.get<float>(), Q, w, nullptr, counters.get<unsigned>() + 1};
      const kernels::NormRouter nr{n, eps, n + H, H};
      return kernels::norm_route_cuda(x.get<float>(), wo, nr, h.get<float>(), router.get<float>(), false, s.norm_topk_prob,
                                      ids.get<std::int32_t>(), topk_w.get<float>(), zero_int.get<std::int32_t>(), 1, K,
                                      table.get<std::int32_t>(), E, arena.copy(i, expert), static_cast<std::int64_t>(expert / sizeof(bf16_t)),
                                      rerouted, st);
    });
  } else {
    measure("router", Ls, weights(E, H), [&](int i) {
      return kernels::linear_cuda(h.get<float>(), 1, H, arena.copy(i, weights(E, H)), E, nullptr, false, router.get<float>(), st);
    });
    if (fused) {
      measure("top-k and reroute", Ls, 0, [&](int i) {
        return kernels::route_cuda(router.get<float>(), false, s.norm_topk_prob, ids.get<std::int32_t>(), topk_w.get<float>(),
                                   zero_int.get<std::int32_t>(), 1, K, table.get<std::int32_t>(), E, E, arena.copy(i, expert),
                                   static_cast<std::int64_t>(expert / sizeof(bf16_t)), scratch.get<int>(), rerouted, st);
      });
    } else {
      measure("softmax and top-k", Ls, 0, [&](int) {
        return kernels::router_topk_cuda(router.get<float>(), 1, E, K, s.norm_topk_prob, ids.get<std::int32_t>(), topk_w.get<float>(), st);
      });
      measure("reroute", Ls, 0, [&](int i) {
        return kernels::reroute_cuda(ids.get<std::int32_t>(), zero_int.get<std::int32_t>(), 1, K, table.get<std::int32_t>(), E, E,
                                     arena.copy(i, expert), static_cast<std::int64_t>(expert / sizeof(bf16_t)), scratch.get<int>(), rerouted, st);
      });
    }
  }
  measure("experts: gate and up", Ls, K * weights(2 * std::int64_t(I), H), [&](int i) {
    return kernels::expert_gate_up_cuda(h.get<float>(), H, I, K, pairs_of(i), K, act.get<float>(), st);
  });
  if (fused) {
    measure("experts: down and combine", Ls, K * weights(H, I), [&](int i) {
      return kernels::expert_down_combine_cuda(act.get<float>(), H, I, K, pairs_of(i), topk_w.get<float>(), x.get<float>(), st);
    });
  } else {
    measure("experts: down", Ls, K * weights(H, I), [&](int i) {
      return kernels::expert_down_cuda(act.get<float>(), H, I, pairs_of(i), K, pair_out.get<float>(), st);
    });
    measure("combine", Ls, 0, [&](int) {
      return kernels::moe_combine_cuda(pair_out.get<float>(), pos_of.get<std::int32_t>(), topk_w.get<float>(), 1, K, H, x.get<float>(), st);
    });
  }
  if (fused) {
    measure("final norm and head", 1, weights(V + 1, H), [&](int i) {
      const bf16_t* w = arena.copy(i, weights(V + 1, H));
      const kernels::LinearPart head[] = {{w, V, nullptr, logits.get<float>()}};
      return kernels::linear_parts_cuda(x.get<float>(), 1, H, head, 1, st, {w + std::size_t(V) * H, eps});
    });
  } else {
    measure("logit row gather", 1, 0, [&](int) {
      return kernels::gather_rows_cuda(x.get<float>(), H, zero_int.get<std::int32_t>(), 1, 1, h.get<float>(), st);
    });
    measure("output head", 1, weights(V, H), [&](int i) {
      return kernels::linear_cuda(h.get<float>(), 1, H, arena.copy(i, weights(V, H)), V, nullptr, false, logits.get<float>(), st);
    });
  }
  return out;
}

AttentionTime time_decode_attention(const ModelSpec& s, int context) {
  if (const auto why = unavailable()) throw DeviceError("device cuda", "", *why);
  if (s.mla)
    throw UnsupportedError("attention timing", std::string(s.model_type()), "times the paged grouped-query kernel, not latent attention",
                           "time DeepSeek's step as a whole");
  if (context < 1 || context > kernels::kMaxAttentionPositions)
    throw InvalidArgument("attention timing", "context", "is " + std::to_string(context),
                          "give 1 … " + std::to_string(kernels::kMaxAttentionPositions) + " positions");
  const int nh = static_cast<int>(s.num_heads), kvh = static_cast<int>(s.num_kv_heads), hd = static_cast<int>(s.head_dim);
  Timer timer(TimingRounds{});
  const cudaStream_t st = timer.stream();
  MOSAIC_CUDA_CHECK(kernels::paged_attention_cuda(nullptr, {}, 0, 1, 1, 1, 1, nullptr, nullptr, nullptr, false, st));  // not captured
  const OneSequence one(context);
  const std::size_t cache_bytes = one.cache_rows * static_cast<std::size_t>(s.kv_width()) * sizeof(bf16_t);
  const Arena arena(std::max(kMinArena, 2 * kLaunches * cache_bytes));  // each launch's keys and values from memory
  const DeviceBuffer q = zeros(sizeof(float) * static_cast<std::size_t>(s.q_width())), out = zeros(sizeof(float) * static_cast<std::size_t>(s.q_width()));
  const DeviceBuffer scratch = zeros(kernels::attention_split_bytes(hd));
  MOSAIC_CUDA_CHECK(cudaDeviceSynchronize());  // the counters zeroed before the timer's stream (non-blocking) reads them
  auto time = [&](kernels::AttentionSplit how) {
    return timer.per_launch([&](int i) {
      const bf16_t* keys = arena.copy(i, 2 * cache_bytes);
      return kernels::paged_attention_cuda(q.get<float>(), one.queries(), 1, nh, kvh, hd, std::max(kGraphPositions, context), keys,
                                           keys + cache_bytes / sizeof(bf16_t), out.get<float>(), false, st, how);
    });
  };
  return {time({scratch.get(), scratch.bytes()}), time({})};
}

}  // namespace mosaic::cuda
