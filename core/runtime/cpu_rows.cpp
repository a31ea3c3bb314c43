#include "runtime/cpu_rows.h"

#include <algorithm>
#include <cmath>

#include <ATen/Parallel.h>

#include "runtime/cpu_ops.h"
#include "runtime/cpu_vectors.h"

namespace mosaic::cpu {
namespace {

using cpu_vectors::v8;

bool plain(const at::Tensor& t) { return t.scalar_type() == at::kFloat && t.is_contiguous(); }

// A prompt's rows over the intra-op threads, 16 at least to a thread: a decode step's few rows stay on
// the caller, as LibTorch's elementwise ops keep small tensors.
template <class F>
void over_rows(std::int64_t rows, const F& f) {
  at::parallel_for(0, rows, 16, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) f(r);
  });
}

// Σ a[k]² over n floats, eight lanes at a time.
float sum_of_squares(const float* a, std::int64_t n) {
  v8 acc{};
  std::int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const v8 v = cpu_vectors::load8(a + k);
    acc += v * v;
  }
  float s = cpu_vectors::hsum(acc);
  for (; k < n; ++k) s += a[k] * a[k];
  return s;
}

}  // namespace

at::Tensor rms_norm_rows(const at::Tensor& x, const at::Tensor& w, double eps) {
  if (!plain(x) || !plain(w) || w.dim() != 1 || x.size(-1) != w.size(0)) return rms_norm(x, w, eps);
  at::Tensor out = at::empty_like(x);
  const std::int64_t H = w.size(0), rows = H == 0 ? 0 : x.numel() / H;
  const float* wp = w.data_ptr<float>();
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  over_rows(rows, [&](std::int64_t r) {
    const float* a = xp + r * H;
    float* o = op + r * H;
    const float inv = 1.0f / std::sqrt(sum_of_squares(a, H) / static_cast<float>(H) + static_cast<float>(eps));
    for (std::int64_t k = 0; k < H; ++k) o[k] = wp[k] * (a[k] * inv);
  });
  return out;
}

at::Tensor rotate_rows(const ModelSpec& s, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  if (s.rope_interleaved || !plain(x) || !plain(cos) || !plain(sin) || x.dim() != 3 || cos.dim() != 2 || cos.sizes() != sin.sizes() ||
      cos.size(0) != x.size(0) || cos.size(1) != x.size(2) || x.size(2) % 2 != 0)
    return rotate(s, x, cos.unsqueeze(1), sin.unsqueeze(1));
  at::Tensor out = at::empty_like(x);
  const std::int64_t n = x.size(0), heads = x.size(1), d = x.size(2), half = d / 2;
  const float *xp = x.data_ptr<float>(), *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
  float* op = out.data_ptr<float>();
  over_rows(n, [&](std::int64_t t) {
    const float* c = cp + t * d;
    const float* sn = sp + t * d;
    for (std::int64_t h = 0; h < heads; ++h) {
      const float* a = xp + (t * heads + h) * d;
      float* o = op + (t * heads + h) * d;
      // transformers' rotate_half: the first half turns against minus the second, the second against the first.
      for (std::int64_t i = 0; i < half; ++i) o[i] = a[i] * c[i] + (-a[i + half]) * sn[i];
      for (std::int64_t i = half; i < d; ++i) o[i] = a[i] * c[i] + a[i - half] * sn[i];
    }
  });
  return out;
}

at::Tensor gate_rows(const at::Tensor& gu) {
  if (!plain(gu) || gu.dim() != 2 || gu.size(1) % 2 != 0) {
    const std::int64_t I = gu.size(-1) / 2;
    return (at::silu(gu.narrow(-1, 0, I)) * gu.narrow(-1, I, I)).contiguous();
  }
  const std::int64_t n = gu.size(0), I = gu.size(1) / 2;
  at::Tensor a = at::empty({n, I}, at::kFloat);
  const float* gp = gu.data_ptr<float>();
  float* ap = a.data_ptr<float>();
  over_rows(n, [&](std::int64_t i) {
    const float* g = gp + i * 2 * I;
    const float* u = g + I;
    float* o = ap + i * I;
    // silu(g) · u = g · u / (1 + e^−g); e^−g clamped at e^88 (g below −88: silu is −0 to float precision).
    std::int64_t k = 0;
    for (; k + 8 <= I; k += 8) {
      const v8 gv = cpu_vectors::load8(g + k);
      v8 e = -gv;
      e = e > 88.0f ? v8{} + 88.0f : e;
      cpu_vectors::store8(o + k, gv * cpu_vectors::load8(u + k) / (1.0f + cpu_vectors::exp8(e)));
    }
    for (; k < I; ++k) o[k] = g[k] * u[k] / (1.0f + std::exp(-g[k]));
  });
  return a;
}

void add_expert_rows(const at::Tensor& x, const std::vector<std::int64_t>& rows, const std::vector<float>& weights, const MlpWeights& m,
                     at::Tensor& out) {
  if (!plain(x) || !plain(out) || x.dim() != 2 || out.dim() != 2) return add_expert(x, rows, weights, m, out, /*batched=*/true);
  const auto n = static_cast<std::int64_t>(rows.size());
  const std::int64_t H = x.size(1);
  at::Tensor picked = at::empty({n, H}, at::kFloat);
  const float* xp = x.data_ptr<float>();
  float* pp = picked.data_ptr<float>();
  over_rows(n, [&](std::int64_t i) { std::copy_n(xp + rows[static_cast<std::size_t>(i)] * H, H, pp + i * H); });
  const at::Tensor gu = gate_up_product(picked, m, /*batched=*/true).contiguous();  // [n, 2I]
  const at::Tensor a = gate_rows(gu);  // [n, I]
  const at::Tensor y = project(a, m.down).contiguous();  // [n, H]
  const float* yp = y.data_ptr<float>();
  float* outp = out.data_ptr<float>();
  // On the caller: a row may come twice (a token's two experts served by one consolidated copy).
  for (std::int64_t i = 0; i < n; ++i) {
    float* dst = outp + rows[static_cast<std::size_t>(i)] * H;
    const float* src = yp + i * H;
    const float w = weights[static_cast<std::size_t>(i)];
    for (std::int64_t k = 0; k < H; ++k) dst[k] += w * src[k];
  }
}

void route_rows(const ModelSpec& s, const at::Tensor& logits, const at::Tensor& bias, const at::Tensor& absent, std::int64_t* ids, float* weights) {
  const std::int64_t E = s.num_experts, k = s.top_k;
  if (s.router_scoring != RouterScoring::Softmax || s.expert_choice != ExpertChoice::TopK || !plain(logits) || logits.dim() != 2 ||
      logits.size(1) != E || k > E || (absent.defined() && (absent.scalar_type() != at::kBool || !absent.is_contiguous()))) {
    const Routed r = route_tokens(s, logits, bias, absent);
    std::copy_n(r.ids.data_ptr<std::int64_t>(), r.ids.numel(), ids);
    std::copy_n(r.weights.data_ptr<float>(), r.weights.numel(), weights);
    return;
  }
  const std::int64_t n = logits.size(0);
  const float* lp = logits.data_ptr<float>();
  const bool* masked = absent.defined() ? absent.data_ptr<bool>() : nullptr;
  std::vector<float> p(static_cast<std::size_t>(E));
  std::vector<char> taken(static_cast<std::size_t>(E));
  for (std::int64_t t = 0; t < n; ++t) {
    // Softmax as LibTorch computes it: e^(x − max) over the sum; masked experts at −inf take none.
    float high = -INFINITY;
    for (std::int64_t e = 0; e < E; ++e) {
      p[static_cast<std::size_t>(e)] = masked && masked[t * E + e] ? -INFINITY : lp[t * E + e];
      high = std::max(high, p[static_cast<std::size_t>(e)]);
    }
    float sum = 0;
    for (float& v : p) sum += (v = std::exp(v - high));
    for (float& v : p) v /= sum;
    std::fill(taken.begin(), taken.end(), 0);
    float chosen = 0;
    for (std::int64_t j = 0; j < k; ++j) {
      std::int64_t best = -1;
      for (std::int64_t e = 0; e < E; ++e)
        if (!taken[static_cast<std::size_t>(e)] && (best < 0 || p[static_cast<std::size_t>(e)] > p[static_cast<std::size_t>(best)])) best = e;
      taken[static_cast<std::size_t>(best)] = 1;
      ids[t * k + j] = best;
      chosen += (weights[t * k + j] = p[static_cast<std::size_t>(best)]);
    }
    for (std::int64_t j = 0; j < k; ++j) {
      if (s.norm_topk_prob) weights[t * k + j] /= chosen;
      if (s.routed_scaling_factor != 1.0) weights[t * k + j] *= static_cast<float>(s.routed_scaling_factor);
    }
  }
}

bool all_finite(const at::Tensor& x) {
  if (!plain(x)) return at::isfinite(x).all().item<bool>();
  const float* p = x.data_ptr<float>();
  // Any infinity or NaN makes the sum of x·0 NaN: one pass, no branch per value.
  float probe = 0.0f;
  for (std::int64_t i = 0; i < x.numel(); ++i) probe += p[i] * 0.0f;
  return probe == 0.0f;
}

}  // namespace mosaic::cpu
