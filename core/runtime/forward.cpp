#include "runtime/forward.h"

#include <c10/core/GradMode.h>

#include <limits>
#include <string>

#include "common/error.h"
#include "runtime/cpu_ops.h"

namespace mosaic {

struct KvCache::Impl {
  // Per layer [batch, kvh, capacity, hd]; with latent attention k holds [batch, 1, capacity, rkv + dr]
  // (the normalized latent and the rotated shared key) and v nothing.
  std::vector<at::Tensor> k, v;
  std::int64_t batch = 0, capacity = 0, position = 0;
};

KvCache::KvCache(const ModelSpec& s, std::int64_t batch, std::int64_t capacity) : impl_(std::make_unique<Impl>()) {
  if (batch <= 0 || capacity <= 0)
    throw InvalidArgument("KV cache", "", "batch and capacity must be positive");
  impl_->batch = batch;
  impl_->capacity = capacity;
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    // Uninitialized: attention reads only the prefix [0, position) that forward() has written.
    if (s.mla) {
      impl_->k.push_back(at::empty({batch, 1, capacity, s.kv_cache_width()}, at::kFloat));
      impl_->v.push_back(at::empty({0}, at::kFloat));
      continue;
    }
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

using namespace cpu;

// DeepSeek's latent attention as transformers computes it (DeepseekV3Attention): the cache holds
// each token's normalized latent and rotated shared key; keys and values are expanded from the
// latent through kv_b_proj every step, and each head's query [nope | rope] meets key [nope | rope].
// (The batched step computes the same in its absorbed form, over the latent: cpu_step.cpp.)
at::Tensor latent_attention(const ModelSpec& s, const LayerWeights& L, KvCache::Impl& cache, std::int64_t layer, const at::Tensor& h,
                            const at::Tensor& cos, const at::Tensor& sin) {
  const LatentAttention& a = *s.mla;
  const std::int64_t B = h.size(0), T = h.size(1), p0 = cache.position, nh = s.num_heads;
  const LatentQkv p = project_latent(s, L, h, /*batched=*/false);  // [B, T, nh, ·], [B, T, rkv], [B, T, dr]
  const at::Tensor q_pe = rotate(s, p.q_pe.transpose(1, 2), cos, sin);  // [B, nh, T, dr]
  const at::Tensor k_pe = rotate(s, p.k_pe, cos, sin);                  // [B, T, dr]
  cache.k[layer].narrow(2, p0, T).copy_(at::cat({p.latent, k_pe}, -1).unsqueeze(1));
  const at::Tensor q = at::cat({p.q_nope.transpose(1, 2), q_pe}, -1);  // [B, nh, T, dq]
  std::vector<at::Tensor> rows;
  for (std::int64_t b = 0; b < B; ++b) {
    const at::Tensor cached = cache.k[layer][b][0].narrow(0, 0, p0 + T);  // [S, rkv + dr]
    const std::int64_t S = cached.size(0);
    const at::Tensor kv = affine(cached.narrow(1, 0, a.kv_lora_rank), L.wkv_b).view({S, nh, a.nope_dim + a.v_dim}).transpose(0, 1);
    const at::Tensor k = at::cat({kv.narrow(2, 0, a.nope_dim), cached.narrow(1, a.kv_lora_rank, a.rope_dim).unsqueeze(0).expand({nh, S, a.rope_dim})}, -1);
    rows.push_back(attend(q[b], k, kv.narrow(2, a.nope_dim, a.v_dim), s.softmax_scale()));
  }
  return affine(at::stack(rows), L.wo, L.bo);  // [B, T, H]
}

// Self-attention of B sequences of T new tokens each over their contiguous caches; h [B, T, H].
at::Tensor attention(const ModelSpec& s, const LayerWeights& L, KvCache::Impl& cache, std::int64_t layer,
                     const at::Tensor& h, const at::Tensor& cos, const at::Tensor& sin) {
  if (s.mla) return latent_attention(s, L, cache, layer, h, cos, sin);
  const std::int64_t B = h.size(0), T = h.size(1), p0 = cache.position;
  auto [q, k, v] = project_heads(s, L, h, /*batched=*/false);  // [B, T, heads, hd]
  q = rotate(s, q.transpose(1, 2), cos, sin);  // [B, nh, T, hd]
  k = rotate(s, k.transpose(1, 2), cos, sin);  // [B, kvh, T, hd]
  cache.k[layer].narrow(2, p0, T).copy_(k);
  cache.v[layer].narrow(2, p0, T).copy_(v.transpose(1, 2));
  std::vector<at::Tensor> rows;
  for (std::int64_t b = 0; b < B; ++b)
    rows.push_back(attend(q[b], cache.k[layer][b].narrow(1, 0, p0 + T), cache.v[layer][b].narrow(1, 0, p0 + T), s.softmax_scale()));
  return affine(at::stack(rows), L.wo, L.bo);  // [B, T, H]
}

// Router → top-k → every routed expert of the model → plus the shared expert, on [B, T, H].
at::Tensor moe(const ModelSpec& s, const LayerWeights& L, const at::Tensor& h, const std::vector<bool>* allowed, std::int64_t layer,
               const ExpertInputSink* sink) {
  const at::Tensor x = h.reshape({-1, s.hidden_size});  // [N, H]
  const std::int64_t N = x.size(0);
  const at::Tensor logits = affine(x, L.router);  // [N, E]
  at::Tensor absent;
  if (allowed) {
    absent = at::zeros({N, s.num_experts}, at::kBool);
    for (std::int64_t e = 0; e < s.num_experts; ++e)
      if (!(*allowed)[static_cast<std::size_t>(e)]) absent.select(1, e).fill_(true);
  }
  const auto [top_w, top_i] = route_tokens(s, logits, L.router_bias, absent);  // [N, k]
  // Group (token, weight) pairs by expert on the host: E small lists instead of E masked passes.
  std::vector<std::vector<std::int64_t>> rows(static_cast<std::size_t>(s.num_experts));
  std::vector<std::vector<float>> weights(rows.size());
  const auto* ti = top_i.data_ptr<std::int64_t>();
  const auto* tw = top_w.data_ptr<float>();
  for (std::int64_t i = 0; i < N * s.top_k; ++i) {
    rows[static_cast<std::size_t>(ti[i])].push_back(i / s.top_k);
    weights[static_cast<std::size_t>(ti[i])].push_back(tw[i]);
  }
  at::Tensor out = at::zeros_like(x);
  for (std::size_t e = 0; e < rows.size(); ++e)
    if (!rows[e].empty()) add_expert(x, rows[e], weights[e], L.experts[e], out);
  if (sink)
    for (std::size_t e = 0; e < rows.size(); ++e) {
      if (rows[e].empty()) continue;
      const auto n = static_cast<std::int64_t>(rows[e].size());
      const at::Tensor xe = x.index_select(0, at::from_blob(rows[e].data(), {n}, at::kLong)).contiguous();
      const at::Tensor gu = affine(xe, L.experts[e].gate_up);  // [n, 2I]
      const std::int64_t I = gu.size(1) / 2;
      const at::Tensor mid = (at::silu(gu.narrow(1, 0, I)) * gu.narrow(1, I, I)).contiguous();
      (*sink)(layer, static_cast<std::int64_t>(e), rows[e], {xe.data_ptr<float>(), static_cast<std::size_t>(xe.numel())},
              {mid.data_ptr<float>(), static_cast<std::size_t>(mid.numel())});
    }
  if (L.shared_gate.defined()) out += at::sigmoid(affine(x, L.shared_gate)) * swiglu(x, L.shared);
  else if (L.shared.defined()) out += swiglu(x, L.shared);  // DeepSeek's shared experts: no gate
  return out.view(h.sizes());
}

}  // namespace

Logits forward(const Model& model, KvCache& kv, std::span<const std::int64_t> ids, LogitsFor which,
               const std::vector<std::vector<bool>>* allowed, const ExpertInputSink* sink) {
  const ModelSpec& s = model.spec();
  const ModelWeights& W = model.weights();
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

  c10::NoGradGuard no_grad;
  const at::Tensor id_t = at::from_blob(const_cast<std::int64_t*>(ids.data()), {B * T}, at::kLong);
  at::Tensor x = W.embed.index_select(0, id_t).view({B, T, s.hidden_size});
  const auto [cos, sin] = rotary(at::arange(p0, p0 + T, at::kLong), W.inv_freq, s.rope_scaling.attention_factor);  // [T, rope_dim]

  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    const LayerWeights& L = W.layers[static_cast<std::size_t>(l)];
    x = x + attention(s, L, cache, l, rms_norm(x, L.input_norm, s.rms_norm_eps), cos, sin);
    const at::Tensor h = rms_norm(x, L.post_norm, s.rms_norm_eps);
    x = x + (s.is_sparse(l) ? moe(s, L, h, allowed ? &(*allowed)[static_cast<std::size_t>(l)] : nullptr, l, sink) : swiglu(h, L.shared));
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
