#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/latent_attention.h"

namespace mosaic::kernels {
namespace {

// The rotary part x [rope] turned by one token's cos and sin rows [rope], into out.
void turn(const float* x, const float* cos, const float* sin, const LatentShape& s, float* out) {
  const int half = s.rope / 2;
  for (int i = 0; i < half; ++i) {
    const int a = s.interleaved ? 2 * i : i, b = s.interleaved ? 2 * i + 1 : i + half;
    out[a] = x[a] * cos[i] - x[b] * sin[i];
    out[b] = x[b] * cos[i] + x[a] * sin[i];
  }
}

}  // namespace

bool latent_shape_valid(const LatentShape& s) {
  return s.heads > 0 && s.nope > 0 && s.v > 0 && s.rope > 0 && s.rope % 2 == 0 && s.rank > 0 && s.rank % 2 == 0 && s.row() <= kMaxLatentRow;
}

void latent_kv_write_reference(const float* kv, const bf16_t* norm, float eps, const float* cos, const float* sin, PagedQueries pq,
                               int tokens, LatentShape s, bf16_t* cache) {
  std::vector<float> turned(static_cast<std::size_t>(s.rope));
  for (int t = 0; t < tokens; ++t) {
    const float* x = kv + static_cast<std::int64_t>(t) * s.row();
    bf16_t* to = cache + cache_row(pq, t, pq.position[t]) * s.row();
    double ss = 0;
    for (int i = 0; i < s.rank; ++i) ss += static_cast<double>(x[i]) * x[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / s.rank + eps));
    for (int i = 0; i < s.rank; ++i) to[i] = float_to_bf16(bf16_to_float(norm[i]) * (x[i] * scale));
    turn(x + s.rank, cos + static_cast<std::int64_t>(t) * s.rope, sin + static_cast<std::int64_t>(t) * s.rope, s, turned.data());
    for (int i = 0; i < s.rope; ++i) to[s.rank + i] = float_to_bf16(turned[static_cast<std::size_t>(i)]);
  }
}

void latent_queries_reference(const float* q, const bf16_t* kv_b, const float* cos, const float* sin, int tokens, LatentShape s,
                              float* out) {
  const int in = s.nope + s.rope;
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < s.heads; ++h) {
      const float* x = q + (static_cast<std::int64_t>(t) * s.heads + h) * in;
      float* y = out + (static_cast<std::int64_t>(t) * s.heads + h) * s.row();
      const bf16_t* w = kv_b + static_cast<std::int64_t>(h) * (s.nope + s.v) * s.rank;
      for (int c = 0; c < s.rank; ++c) {
        double acc = 0;
        for (int d = 0; d < s.nope; ++d) acc += static_cast<double>(x[d]) * bf16_to_float(w[static_cast<std::int64_t>(d) * s.rank + c]);
        y[c] = static_cast<float>(acc);
      }
      turn(x + s.nope, cos + static_cast<std::int64_t>(t) * s.rope, sin + static_cast<std::int64_t>(t) * s.rope, s, y + s.rank);
    }
}

void latent_attention_reference(const float* q, PagedQueries pq, int tokens, LatentShape s, float scale, const bf16_t* cache,
                                float* out) {
  const int W = s.row();
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < s.heads; ++h) {
      const int positions = pq.position[t] + 1;
      const float* qv = q + (static_cast<std::int64_t>(t) * s.heads + h) * W;
      std::vector<double> p(static_cast<std::size_t>(positions));
      double m = -INFINITY, sum = 0;
      for (int i = 0; i < positions; ++i) {
        const bf16_t* row = cache + cache_row(pq, t, i) * W;
        double dot = 0;
        for (int d = 0; d < W; ++d) dot += static_cast<double>(qv[d]) * bf16_to_float(row[d]);
        m = std::max(m, p[static_cast<std::size_t>(i)] = dot * scale);
      }
      for (double& x : p) sum += (x = std::exp(x - m));
      float* o = out + (static_cast<std::int64_t>(t) * s.heads + h) * s.rank;
      for (int c = 0; c < s.rank; ++c) {
        double acc = 0;
        for (int i = 0; i < positions; ++i) acc += p[static_cast<std::size_t>(i)] * bf16_to_float(cache[cache_row(pq, t, i) * W + c]);
        o[c] = static_cast<float>(acc / sum);
      }
    }
}

void latent_values_reference(const float* o, const bf16_t* kv_b, int tokens, LatentShape s, float* out) {
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < s.heads; ++h) {
      const float* x = o + (static_cast<std::int64_t>(t) * s.heads + h) * s.rank;
      const bf16_t* w = kv_b + (static_cast<std::int64_t>(h) * (s.nope + s.v) + s.nope) * s.rank;
      for (int j = 0; j < s.v; ++j) {
        double acc = 0;
        for (int c = 0; c < s.rank; ++c) acc += static_cast<double>(x[c]) * bf16_to_float(w[static_cast<std::int64_t>(j) * s.rank + c]);
        out[static_cast<std::int64_t>(t) * s.heads * s.v + static_cast<std::int64_t>(h) * s.v + j] = static_cast<float>(acc);
      }
    }
}

}  // namespace mosaic::kernels
