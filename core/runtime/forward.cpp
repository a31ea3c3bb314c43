#include "runtime/forward.h"

#include <cmath>
#include <string>

#include "common/error.h"
#include "runtime/forward_core.h"

namespace mosaic {

struct KvCache::Impl {
  std::vector<at::Tensor> k, v;  // per layer [batch, kvh, capacity, hd]
  std::int64_t batch = 0, capacity = 0, position = 0;
};

KvCache::KvCache(const ModelSpec& s, std::int64_t batch, std::int64_t capacity) : impl_(std::make_unique<Impl>()) {
  if (batch <= 0 || capacity <= 0)
    throw InvalidArgument("KV cache", "", "batch and capacity must be positive");
  impl_->batch = batch;
  impl_->capacity = capacity;
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    // Uninitialized: attention reads only the prefix [0, position) that forward() has written.
    impl_->k.push_back(at::empty({batch, s.num_kv_heads, capacity, s.head_dim}, at::kFloat));
    impl_->v.push_back(at::empty({batch, s.num_kv_heads, capacity, s.head_dim}, at::kFloat));
  }
}
KvCache::~KvCache() = default;
KvCache::KvCache(KvCache&&) noexcept = default;
KvCache& KvCache::operator=(KvCache&&) noexcept = default;
std::int64_t KvCache::batch() const { return impl_->batch; }
std::int64_t KvCache::capacity() const { return impl_->capacity; }
std::int64_t KvCache::position() const { return impl_->position; }
void KvCache::reset() { impl_->position = 0; }

namespace {

// transformers' RMSNorm: x * rsqrt(mean(x²) + eps), then scaled by the weight; over the last dim.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return w * (x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps));
}

at::Tensor affine(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {}) {
  return at::linear(x, w, b.defined() ? c10::optional<at::Tensor>(b) : c10::nullopt);
}

// Rotary embedding on [B, heads, T, hd] with the non-interleaved halves transformers uses.
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const std::int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

at::Tensor swiglu(const at::Tensor& x, const MlpWeights& m) {
  const at::Tensor gu = affine(x, m.gate_up);  // [n, 2I]
  const std::int64_t I = gu.size(-1) / 2;
  return affine(at::silu(gu.narrow(-1, 0, I)) * gu.narrow(-1, I, I), m.down);
}

at::Tensor attention(const ModelSpec& s, const LayerWeights& L, KvCache::Impl& cache, std::int64_t layer,
                     const at::Tensor& h, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& mask) {
  const std::int64_t B = h.size(0), T = h.size(1), p0 = cache.position;
  const std::int64_t nh = s.num_heads, kvh = s.num_kv_heads, hd = s.head_dim, rep = nh / kvh;
  at::Tensor q = affine(h, L.wq, L.bq);  // [B, T, nh*hd]
  at::Tensor k = affine(h, L.wk, L.bk);  // [B, T, kvh*hd]
  at::Tensor v = affine(h, L.wv, L.bv);
  if (s.qk_norm == QkNorm::Whole) {  // OLMoE: over the whole projection, before the head split
    q = rms_norm(q, L.q_norm, s.rms_norm_eps);
    k = rms_norm(k, L.k_norm, s.rms_norm_eps);
  }
  if (s.clip_qkv) {
    q = q.clamp(-*s.clip_qkv, *s.clip_qkv);
    k = k.clamp(-*s.clip_qkv, *s.clip_qkv);
    v = v.clamp(-*s.clip_qkv, *s.clip_qkv);
  }
  q = q.view({B, T, nh, hd});
  k = k.view({B, T, kvh, hd});
  if (s.qk_norm == QkNorm::PerHead) {  // Qwen3: per head, before rotary
    q = rms_norm(q, L.q_norm, s.rms_norm_eps);
    k = rms_norm(k, L.k_norm, s.rms_norm_eps);
  }
  q = rope(q.transpose(1, 2), cos, sin);  // [B, nh, T, hd]
  k = rope(k.transpose(1, 2), cos, sin);  // [B, kvh, T, hd]
  cache.k[layer].narrow(2, p0, T).copy_(k);
  cache.v[layer].narrow(2, p0, T).copy_(v.view({B, T, kvh, hd}).transpose(1, 2));
  const at::Tensor K = cache.k[layer].narrow(2, 0, p0 + T).unsqueeze(2);  // [B, kvh, 1, S, hd]
  const at::Tensor V = cache.v[layer].narrow(2, 0, p0 + T).unsqueeze(2);

  // Grouped-query attention without copying keys: query head h reads kv head h / rep.
  at::Tensor scores = at::matmul(q.reshape({B, kvh, rep, T, hd}), K.transpose(-1, -2)) *
                      (1.0 / std::sqrt(static_cast<double>(hd)));  // [B, kvh, rep, T, S]
  if (mask.defined()) scores.masked_fill_(mask, -std::numeric_limits<float>::infinity());
  const at::Tensor out = at::matmul(at::softmax(scores, -1), V);  // [B, kvh, rep, T, hd]
  return affine(out.reshape({B, nh, T, hd}).transpose(1, 2).reshape({B, T, nh * hd}), L.wo, L.bo);
}

// Router → top-k → the caller's routed experts → plus the shared expert, on [B, T, H].
at::Tensor moe(const ModelSpec& s, std::int64_t layer, const LayerWeights& L, const at::Tensor& h,
               const RoutedExperts& experts) {
  const at::Tensor x = h.reshape({-1, s.hidden_size});  // [N, H]
  const std::int64_t N = x.size(0);
  const at::Tensor probs = at::softmax(affine(x, L.router), -1);  // [N, E]
  auto [top_w, top_i] = probs.topk(s.top_k, -1);                  // [N, k]
  if (s.norm_topk_prob) top_w = top_w / top_w.sum(-1, /*keepdim=*/true);
  top_w = top_w.contiguous();
  top_i = top_i.contiguous();

  // Group (token, weight) pairs by expert on the host: E small lists instead of E masked passes.
  ExpertGroups groups;
  groups.rows.resize(static_cast<std::size_t>(s.num_experts));
  groups.weights.resize(static_cast<std::size_t>(s.num_experts));
  const auto* ti = top_i.data_ptr<std::int64_t>();
  const auto* tw = top_w.data_ptr<float>();
  for (std::int64_t i = 0; i < N * s.top_k; ++i) {
    groups.rows[static_cast<std::size_t>(ti[i])].push_back(i / s.top_k);
    groups.weights[static_cast<std::size_t>(ti[i])].push_back(tw[i]);
  }
  at::Tensor out = at::zeros_like(x);
  experts(layer, x, groups, out);
  if (L.shared_gate.defined()) out += at::sigmoid(affine(x, L.shared_gate)) * swiglu(x, L.shared);
  return out.view(h.sizes());
}

}  // namespace

void add_expert(const at::Tensor& x, const std::vector<std::int64_t>& rows, const std::vector<float>& weights,
                const MlpWeights& m, at::Tensor& out) {
  const auto n = static_cast<std::int64_t>(rows.size());
  const at::Tensor idx = at::from_blob(const_cast<std::int64_t*>(rows.data()), {n}, at::kLong);
  const at::Tensor w = at::from_blob(const_cast<float*>(weights.data()), {n, 1}, at::kFloat);
  out.index_add_(0, idx, swiglu(x.index_select(0, idx), m) * w);
}

Logits forward(const Model& model, KvCache& kv, std::span<const std::int64_t> ids, LogitsFor which) {
  const ModelWeights& W = model.weights();
  return forward_with(model.spec(), W, kv, ids, which,
                      [&](std::int64_t layer, const at::Tensor& x, const ExpertGroups& g, at::Tensor& out) {
                        const auto& experts = W.layers[static_cast<std::size_t>(layer)].experts;
                        for (std::size_t e = 0; e < g.rows.size(); ++e)
                          if (!g.rows[e].empty()) add_expert(x, g.rows[e], g.weights[e], experts[e], out);
                      });
}

Logits forward_with(const ModelSpec& s, const ModelWeights& W, KvCache& kv, std::span<const std::int64_t> ids,
                    LogitsFor which, const RoutedExperts& experts) {
  KvCache::Impl& cache = kv.impl();
  const std::int64_t B = cache.batch;
  if (ids.empty() || static_cast<std::int64_t>(ids.size()) % B != 0)
    throw InvalidArgument("forward", "input ids", std::to_string(ids.size()) + " ids do not fill " +
                                                     std::to_string(B) + " equal rows");
  const std::int64_t T = static_cast<std::int64_t>(ids.size()) / B, p0 = cache.position;
  if (p0 + T > cache.capacity)
    throw InvalidArgument("forward", "input ids", "the sequence would reach " + std::to_string(p0 + T) +
                                                     " tokens, past the KV cache's " + std::to_string(cache.capacity),
                          "ask for fewer tokens or a larger cache");
  for (std::int64_t id : ids)
    if (id < 0 || id >= s.vocab_size)
      throw InvalidArgument("forward", "token id " + std::to_string(id),
                            "is outside the vocabulary [0, " + std::to_string(s.vocab_size) + ")");

  at::NoGradGuard no_grad;
  const at::Tensor id_t = at::from_blob(const_cast<std::int64_t*>(ids.data()), {B * T}, at::kLong);
  at::Tensor x = W.embed.index_select(0, id_t).view({B, T, s.hidden_size});

  const at::Tensor positions = at::arange(p0, p0 + T, at::kLong);
  const at::Tensor freqs = at::outer(positions.to(at::kFloat), W.inv_freq);  // [T, hd/2]
  const at::Tensor emb = at::cat({freqs, freqs}, -1);    // [T, hd]
  const at::Tensor cos = emb.cos(), sin = emb.sin();
  at::Tensor mask;  // true where query i (position p0+i) must not see key j
  if (T > 1) {
    const at::Tensor qpos = positions.unsqueeze(1);
    const at::Tensor kpos = at::arange(0, p0 + T, at::kLong).unsqueeze(0);
    mask = kpos > qpos;  // [T, S]
  }

  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    const LayerWeights& L = W.layers[l];
    x = x + attention(s, L, cache, l, rms_norm(x, L.input_norm, s.rms_norm_eps), cos, sin, mask);
    const at::Tensor h = rms_norm(x, L.post_norm, s.rms_norm_eps);
    x = x + (s.is_sparse(l) ? moe(s, l, L, h, experts) : swiglu(h, L.shared));
  }
  cache.position += T;

  if (which == LogitsFor::LastPosition) x = x.narrow(1, T - 1, 1);
  const at::Tensor logits = affine(rms_norm(x, W.final_norm, s.rms_norm_eps), W.lm_head).contiguous();
  Logits out;
  out.vocab = s.vocab_size;
  out.rows = logits.numel() / s.vocab_size;
  out.values.assign(logits.data_ptr<float>(), logits.data_ptr<float>() + logits.numel());
  return out;
}

}  // namespace mosaic
