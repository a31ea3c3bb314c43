#include "runtime/cpu_ops.h"

#include <cmath>
#include <limits>

#include <ATen/Parallel.h>

#include "runtime/cpu_gemm.h"

namespace mosaic::cpu {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return w * (x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps));
}

at::Tensor affine(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return at::linear(x, w, b.defined() ? c10::optional<at::Tensor>(b) : c10::nullopt);
}

at::Tensor project(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  constexpr std::int64_t kMaxRows = 8;  // beyond this OpenBLAS's packed GEMM is as fast (bench-runtime)
  if (x.dim() != 2 || w.dim() != 2 || x.size(0) > kMaxRows || x.scalar_type() != at::kFloat || w.scalar_type() != at::kFloat)
    return affine(x, w, b);
  const std::int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const at::Tensor xc = x.contiguous(), wc = w.contiguous();
  at::Tensor y = at::empty({M, N}, at::kFloat);
  const float* xp = xc.data_ptr<float>();
  const float* wp = wc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  // Row ranges of w, even-sized, split over the intra-op threads.
  at::parallel_for(0, (N + 1) / 2, 64, [&](std::int64_t begin, std::int64_t end) {
    skinny_gemm(xp, M, K, wp, 2 * begin, std::min(N, 2 * end), yp, N);
  });
  if (b.defined()) y.add_(b);
  return y;
}

at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const std::int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

at::Tensor swiglu(const at::Tensor& x, const MlpWeights& m, bool batched) {
  const auto proj = batched ? project : affine;
  const at::Tensor gu = proj(x, m.gate_up, {});  // [n, 2I]
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
  const auto proj = batched ? project : affine;
  at::Tensor q = proj(h, L.wq, L.bq), k = proj(h, L.wk, L.bk), v = proj(h, L.wv, L.bv);
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

at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const std::int64_t nh = q.size(0), T = q.size(1), hd = q.size(2), kvh = k.size(0), S = k.size(1);
  at::Tensor scores = at::matmul(q.reshape({kvh, nh / kvh, T, hd}), k.unsqueeze(1).transpose(-1, -2)) *
                      (1.0 / std::sqrt(static_cast<double>(hd)));  // [kvh, rep, T, S]
  if (T > 1) {
    const at::Tensor qpos = at::arange(S - T, S, at::kLong).unsqueeze(1);
    const at::Tensor kpos = at::arange(0, S, at::kLong).unsqueeze(0);
    scores.masked_fill_(kpos > qpos, -std::numeric_limits<float>::infinity());
  }
  const at::Tensor out = at::matmul(at::softmax(scores, -1), v.unsqueeze(1));  // [kvh, rep, T, hd]
  return out.reshape({nh, T, hd}).transpose(0, 1).reshape({T, nh * hd});
}

std::pair<at::Tensor, at::Tensor> rotary(const at::Tensor& positions, const at::Tensor& inv_freq) {
  const at::Tensor freqs = at::outer(positions.to(at::kFloat), inv_freq);  // [P, hd/2]
  const at::Tensor emb = at::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
}

at::Tensor inverse_frequencies(const ModelSpec& s) {
  return (1.0 / at::pow(s.rope_theta, at::arange(0, s.head_dim, 2, at::kLong).to(at::kFloat) / s.head_dim)).to(at::kFloat);
}

at::Tensor to_fp32(const std::byte* data, DType dtype, const std::vector<std::int64_t>& shape) {
  at::ScalarType type = at::kFloat;
  switch (dtype) {
    case DType::BF16: type = at::kBFloat16; break;
    case DType::F16: type = at::kHalf; break;
    case DType::F64: type = at::kDouble; break;
    default: break;  // F32: weights are floating (Checkpoint refuses others)
  }
  // The source may be an unaligned, read-only map: copy, never view.
  return at::from_blob(const_cast<std::byte*>(data), shape, at::TensorOptions().dtype(type))
      .to(at::kFloat, /*non_blocking=*/false, /*copy=*/true)
      .contiguous();
}

}  // namespace mosaic::cpu
