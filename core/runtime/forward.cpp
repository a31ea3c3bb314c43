#include "runtime/forward.h"

#include <c10/core/GradMode.h>

#include <limits>
#include <string>

#include "common/error.h"
#include "runtime/cpu_ops.h"

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

using namespace cpu;

// Self-attention of B sequences of T new tokens each over their contiguous caches; h [B, T, H].
at::Tensor attention(const ModelSpec& s, const LayerWeights& L, KvCache::Impl& cache, std::int64_t layer,
                     const at::Tensor& h, const at::Tensor& cos, const at::Tensor& sin) {
  const std::int64_t B = h.size(0), T = h.size(1), p0 = cache.position;
  auto [q, k, v] = project_heads(s, L, h, /*batched=*/false);  // [B, T, heads, hd]
  q = rope(q.transpose(1, 2), cos, sin);  // [B, nh, T, hd]
  k = rope(k.transpose(1, 2), cos, sin);  // [B, kvh, T, hd]
  cache.k[layer].narrow(2, p0, T).copy_(k);
  cache.v[layer].narrow(2, p0, T).copy_(v.transpose(1, 2));
  std::vector<at::Tensor> rows;
  for (std::int64_t b = 0; b < B; ++b)
    rows.push_back(attend(q[b], cache.k[layer][b].narrow(1, 0, p0 + T), cache.v[layer][b].narrow(1, 0, p0 + T)));
  return affine(at::stack(rows), L.wo, L.bo);  // [B, T, H]
}

// Router → top-k → every routed expert of the model → plus the shared expert, on [B, T, H].
at::Tensor moe(const ModelSpec& s, const LayerWeights& L, const at::Tensor& h, const std::vector<bool>* allowed, std::int64_t layer,
               const ExpertInputSink* sink) {
  const at::Tensor x = h.reshape({-1, s.hidden_size});  // [N, H]
  const std::int64_t N = x.size(0);
  at::Tensor logits = affine(x, L.router);  // [N, E]
  if (allowed)
    for (std::int64_t e = 0; e < s.num_experts; ++e)
      if (!(*allowed)[static_cast<std::size_t>(e)]) logits.select(1, e).fill_(-std::numeric_limits<float>::infinity());
  const at::Tensor probs = at::softmax(logits, -1);
  auto [top_w, top_i] = probs.topk(s.top_k, -1);                  // [N, k]
  if (s.norm_topk_prob) top_w = top_w / top_w.sum(-1, /*keepdim=*/true);
  top_w = top_w.contiguous();
  top_i = top_i.contiguous();
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
  const auto [cos, sin] = rotary(at::arange(p0, p0 + T, at::kLong), W.inv_freq);  // [T, hd]

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
