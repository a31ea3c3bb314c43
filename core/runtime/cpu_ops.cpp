#include "runtime/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <ATen/Parallel.h>

#include "model/rope.h"
#include "runtime/cpu_gemm.h"

namespace mosaic::cpu {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return w * (x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps));
}

at::Tensor affine(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  // bf16 weights (the CPU backend's, held as stored) are widened whole for LibTorch's fp32 GEMM: exact,
  // so the product is the fp32 weights'. Measured against the alternatives (bench-forward --engine):
  // LibTorch's bf16 GEMM is far slower; widening blocks of rows that stay in cache and multiplying
  // each (threaded, or one block a thread) costs more in calls than it saves in bytes. project()
  // sends products of up to 64 rows to the skinny kernel instead.
  const at::Tensor wx = w.scalar_type() == at::kBFloat16 && x.scalar_type() == at::kFloat ? w.to(at::kFloat) : w;
  return at::linear(x, wx, b.defined() ? c10::optional<at::Tensor>(b) : c10::nullopt);
}

namespace {

// Up to 64 rows the skinny kernel (about 50 GFLOP/s on this project's 2-core VM at any row count from
// 3 up, OpenBLAS's in-cache GEMM 40) beats the GEMM, and for bf16 weights saves widening them whole
// each call: batch 16 of the 0.6 B model held bf16 212 -> 155 ms a step, 128-token prefill 118 -> 137
// tokens/s; fp32 prefill 125 -> 135. Past it the GEMM's blocking wins (a 512-token prompt's products:
// 154 tokens/s with the limit at 64 or 8, 110 with every product skinny). bench-forward --engine,
// 2026-11-29.
constexpr std::int64_t kMaxRows = 64;

bool skinny(const at::Tensor& x, const at::Tensor& w) {
  return x.dim() == 2 && w.dim() == 2 && x.size(0) <= kMaxRows && x.scalar_type() == at::kFloat && x.size(1) == w.size(1) &&
         (w.scalar_type() == at::kFloat || w.scalar_type() == at::kBFloat16);
}

// Rows [n0, n1) of y = x · wᵀ, w fp32 or bf16 (contiguous).
void skinny_rows(const float* x, std::int64_t M, std::int64_t K, const at::Tensor& w, std::int64_t n0, std::int64_t n1, float* y) {
  const std::int64_t N = w.size(0);
  if (w.scalar_type() == at::kBFloat16)
    skinny_gemm_bf16(x, M, K, reinterpret_cast<const std::uint16_t*>(w.data_ptr<at::BFloat16>()), n0, n1, y, N);
  else
    skinny_gemm(x, M, K, w.data_ptr<float>(), n0, n1, y, N);
}

}  // namespace

at::Tensor project(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return project_each(x, {{w, b}}).front();
}

std::vector<at::Tensor> project_each(const at::Tensor& x, const std::vector<std::pair<at::Tensor, at::Tensor>>& weights) {
  std::vector<at::Tensor> out;
  const bool all_skinny = std::all_of(weights.begin(), weights.end(), [&](const auto& wb) { return skinny(x, wb.first); });
  if (!all_skinny) {
    for (const auto& [w, b] : weights) out.push_back(skinny(x, w) ? project_each(x, {{w, b}}).front() : affine(x, w, b));
    return out;
  }
  const std::int64_t M = x.size(0), K = x.size(1);
  const at::Tensor xc = x.contiguous();
  const float* xp = xc.data_ptr<float>();
  // Each product's rows in pairs, the products one after another: ranges of this list are split over
  // the intra-op threads (even-sized within a product, as a thread's rows of w always were).
  std::vector<at::Tensor> wc;
  std::vector<std::int64_t> first{0};  // per product: its first pair in the list
  for (const auto& [w, b] : weights) {
    wc.push_back(w.contiguous());
    out.push_back(at::empty({M, w.size(0)}, at::kFloat));
    first.push_back(first.back() + (w.size(0) + 1) / 2);
  }
  at::parallel_for(0, first.back(), 64, [&](std::int64_t begin, std::int64_t end) {
    for (std::size_t i = 0; i < wc.size(); ++i) {
      const std::int64_t from = std::max(begin, first[i]) - first[i], to = std::min(end, first[i + 1]) - first[i];
      if (from < to) skinny_rows(xp, M, K, wc[i], 2 * from, std::min(wc[i].size(0), 2 * to), out[i].data_ptr<float>());
    }
  });
  for (std::size_t i = 0; i < weights.size(); ++i)
    if (weights[i].second.defined()) out[i].add_(weights[i].second);
  return out;
}

at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const std::int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

at::Tensor rope_pairs(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  // transformers' DeepSeek-V2 apply_rotary_emb (pairs as complex numbers times e^{iθ}); cos and sin
  // are cat(θ, θ), so their first halves are the pairs' angles.
  const std::int64_t half = x.size(-1) / 2;
  const at::Tensor c = cos.narrow(-1, 0, half), sn = sin.narrow(-1, 0, half);
  const at::Tensor even = x.slice(-1, 0, x.size(-1), 2), odd = x.slice(-1, 1, x.size(-1), 2);
  return at::stack({even * c - odd * sn, even * sn + odd * c}, -1).flatten(-2);
}

at::Tensor rotate(const ModelSpec& s, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return s.rope_interleaved ? rope_pairs(x, cos, sin) : rope(x, cos, sin);
}

LatentQkv project_latent(const ModelSpec& s, const LayerWeights& L, const at::Tensor& h, bool batched) {
  const auto proj = batched ? project : affine;
  const LatentAttention& a = *s.mla;
  // q_a_layernorm and kv_a_layernorm keep their own eps, 1e-6, whatever rms_norm_eps says (transformers
  // and DeepSeek's code construct them without it).
  constexpr double kLatentEps = 1e-6;
  const at::Tensor q = a.q_lora_rank > 0 ? proj(rms_norm(proj(h, L.wq_a, L.bq_a), L.q_a_norm, kLatentEps), L.wq_b, {}) : proj(h, L.wq, {});
  std::vector<std::int64_t> shape(h.sizes().begin(), h.sizes().end() - 1);
  shape.push_back(s.num_heads);
  shape.push_back(s.head_dim);
  const at::Tensor heads = q.reshape(shape);
  const at::Tensor kv = proj(h, L.wkv_a, L.bkv_a);  // [..., rkv + dr]
  return {heads.narrow(-1, 0, a.nope_dim), heads.narrow(-1, a.nope_dim, a.rope_dim),
          rms_norm(kv.narrow(-1, 0, a.kv_lora_rank), L.kv_a_norm, kLatentEps), kv.narrow(-1, a.kv_lora_rank, a.rope_dim)};
}

namespace {

// The indices of the k largest along the last dim, ties to the lower index (a stable sort; topk leaves
// ties to its implementation). Ties arise where masked gating leaves experts or whole groups at −∞ or
// 0; the CUDA router breaks them the same way.
at::Tensor top_indices(const at::Tensor& x, std::int64_t k) {
  return std::get<1>(at::sort(x, /*stable=*/true, /*dim=*/-1, /*descending=*/true)).narrow(-1, 0, k);
}

}  // namespace

Routed route_tokens(const ModelSpec& s, const at::Tensor& logits, const at::Tensor& bias, const at::Tensor& absent) {
  const std::int64_t n = logits.size(0), E = s.num_experts, k = s.top_k;
  constexpr float kNone = -std::numeric_limits<float>::infinity();
  at::Tensor weights, ids;
  // The groups a token may choose from: the topk_group best by `group_score`, the others masked.
  auto within_best_groups = [&](const at::Tensor& scores, const at::Tensor& group_score, float masked) {
    const at::Tensor best = top_indices(group_score, s.topk_group);                            // [n, TG]
    const at::Tensor keep = at::zeros({n, s.n_group}, at::kBool).scatter_(1, best, true);     // [n, G]
    return scores.masked_fill(keep.unsqueeze(-1).expand({n, s.n_group, E / s.n_group}).reshape({n, E}).logical_not(), masked);
  };
  if (s.router_scoring == RouterScoring::Softmax) {
    // Masked experts take no probability: the others' is renormalized over them (SwapMoE's gating).
    const at::Tensor probs = at::softmax(absent.defined() ? logits.masked_fill(absent, kNone) : logits, -1);
    at::Tensor pool = probs;
    // DeepSeek-V2's group_limited_greedy: groups ranked by their best probability; the rest 0
    // (transformers' DeepseekV2TopkRouter, as its tmp_scores).
    if (s.expert_choice == ExpertChoice::GroupMax) pool = within_best_groups(probs, probs.view({n, s.n_group, E / s.n_group}).amax(-1), 0.0f);
    ids = top_indices(pool, k);
    weights = pool.gather(1, ids);
    if (s.norm_topk_prob) weights = weights / weights.sum(-1, /*keepdim=*/true);
  } else {
    // DeepSeek-V3's noaux_tc (DeepseekV3TopkRouter): sigmoid scores; the bias only steers which
    // experts are chosen; groups ranked by the sum of their two best biased scores; masked at −inf
    // (transformers ≥ 5.6, DeepSeek's updated code); weights the unbiased scores of the chosen.
    const at::Tensor scores = at::sigmoid(logits);
    at::Tensor choice = bias.defined() ? scores + bias.unsqueeze(0) : scores;
    if (absent.defined()) choice = choice.masked_fill(absent, kNone);
    if (s.expert_choice != ExpertChoice::TopK)
      choice = within_best_groups(choice, std::get<0>(choice.view({n, s.n_group, E / s.n_group}).topk(2, -1)).sum(-1), kNone);
    ids = top_indices(choice, k);
    weights = scores.gather(1, ids);
    if (s.norm_topk_prob) weights = weights / (weights.sum(-1, /*keepdim=*/true) + 1e-20);
  }
  if (s.routed_scaling_factor != 1.0) weights = weights * s.routed_scaling_factor;
  return {weights.contiguous(), ids.contiguous()};
}

at::Tensor gate_up_product(const at::Tensor& x, const MlpWeights& m, bool batched) {
  const auto proj = batched ? project : affine;
  if (m.gate_up.defined()) return proj(x, m.gate_up, {});
  return at::cat({proj(x, m.gate, {}), proj(x, m.up, {})}, -1);  // the join costs [n, 2I] floats, not weights
}

at::Tensor swiglu(const at::Tensor& x, const MlpWeights& m, bool batched) {
  const auto proj = batched ? project : affine;
  const at::Tensor gu = gate_up_product(x, m, batched);  // [n, 2I]
  const std::int64_t I = gu.size(-1) / 2;
  return proj(at::silu(gu.narrow(-1, 0, I)) * gu.narrow(-1, I, I), m.down, {});
}

void add_expert(const at::Tensor& x, const std::vector<std::int64_t>& rows, const std::vector<float>& weights,
                const MlpWeights& m, at::Tensor& out, bool batched) {
  const auto n = static_cast<std::int64_t>(rows.size());
  const at::Tensor idx = at::from_blob(const_cast<std::int64_t*>(rows.data()), {n}, at::kLong);
  const at::Tensor w = at::from_blob(const_cast<float*>(weights.data()), {n, 1}, at::kFloat);
  out.index_add_(0, idx, swiglu(x.index_select(0, idx), m, batched) * w);
}

HeadsQkv project_heads(const ModelSpec& s, const LayerWeights& L, const at::Tensor& h, bool batched) {
  at::Tensor q, k, v;
  if (batched) {
    const std::vector<at::Tensor> qkv = project_each(h, {{L.wq, L.bq}, {L.wk, L.bk}, {L.wv, L.bv}});
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    q = affine(h, L.wq, L.bq), k = affine(h, L.wk, L.bk), v = affine(h, L.wv, L.bv);
  }
  if (s.qk_norm == QkNorm::Whole) {  // OLMoE: over the whole projection, before the head split
    q = rms_norm(q, L.q_norm, s.rms_norm_eps);
    k = rms_norm(k, L.k_norm, s.rms_norm_eps);
  }
  if (s.clip_qkv) {
    q = q.clamp(-*s.clip_qkv, *s.clip_qkv);
    k = k.clamp(-*s.clip_qkv, *s.clip_qkv);
    v = v.clamp(-*s.clip_qkv, *s.clip_qkv);
  }
  auto heads = [&](const at::Tensor& t, std::int64_t n) {
    std::vector<std::int64_t> shape(h.sizes().begin(), h.sizes().end() - 1);
    shape.push_back(n);
    shape.push_back(s.head_dim);
    return t.reshape(shape);
  };
  q = heads(q, s.num_heads);
  k = heads(k, s.num_kv_heads);
  v = heads(v, s.num_kv_heads);
  if (s.qk_norm == QkNorm::PerHead) {  // Qwen3: per head, before rotary
    q = rms_norm(q, L.q_norm, s.rms_norm_eps);
    k = rms_norm(k, L.k_norm, s.rms_norm_eps);
  }
  return {q, k, v};
}

at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale) {
  const std::int64_t nh = q.size(0), T = q.size(1), hd = q.size(2), kvh = k.size(0), S = k.size(1), dv = v.size(2);
  at::Tensor scores = at::matmul(q.reshape({kvh, nh / kvh, T, hd}), k.unsqueeze(1).transpose(-1, -2)) * scale;  // [kvh, rep, T, S]
  if (T > 1) {
    const at::Tensor qpos = at::arange(S - T, S, at::kLong).unsqueeze(1);
    const at::Tensor kpos = at::arange(0, S, at::kLong).unsqueeze(0);
    scores.masked_fill_(kpos > qpos, -std::numeric_limits<float>::infinity());
  }
  const at::Tensor out = at::matmul(at::softmax(scores, -1), v.unsqueeze(1));  // [kvh, rep, T, dv]
  return out.reshape({nh, T, dv}).transpose(0, 1).reshape({T, nh * dv});
}

std::pair<at::Tensor, at::Tensor> rotary(const at::Tensor& positions, const at::Tensor& inv_freq, double attention_factor) {
  const at::Tensor freqs = at::outer(positions.to(at::kFloat), inv_freq);  // [P, d/2]
  const at::Tensor emb = at::cat({freqs, freqs}, -1);
  if (attention_factor == 1.0) return {emb.cos(), emb.sin()};
  return {emb.cos() * attention_factor, emb.sin() * attention_factor};
}

at::Tensor inverse_frequencies(const ModelSpec& s) {
  const std::int64_t d = s.rope_dim();
  if (s.rope_scaling.kind == RopeKind::Default)  // in fp32 as transformers computes them: bit for bit
    return (1.0 / at::pow(s.rope_theta, at::arange(0, d, 2, at::kLong).to(at::kFloat) / d)).to(at::kFloat);
  const std::vector<double> inv = rope_inverse_frequencies(s);
  return at::tensor(inv, at::kDouble).to(at::kFloat);
}

at::ScalarType aten_type(DType dtype) {
  switch (dtype) {
    case DType::BF16: return at::kBFloat16;
    case DType::F16: return at::kHalf;
    case DType::F64: return at::kDouble;
    default: return at::kFloat;  // F32: weights are floating (Checkpoint refuses others)
  }
}

at::Tensor to_fp32(const std::byte* data, DType dtype, const std::vector<std::int64_t>& shape) {
  // The source may be an unaligned, read-only map: copy, never view.
  return at::from_blob(const_cast<std::byte*>(data), shape, at::TensorOptions().dtype(aten_type(dtype)))
      .to(at::kFloat, /*non_blocking=*/false, /*copy=*/true)
      .contiguous();
}

}  // namespace mosaic::cpu
