#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/paged_attention.h"

namespace mosaic::kernels {

void kv_write_reference(const float* k, const float* v, PagedQueries q, int tokens, int kv_heads, int head_dim,
                        bf16_t* k_cache, bf16_t* v_cache) {
  const int width = kv_heads * head_dim;
  for (int t = 0; t < tokens; ++t) {
    const std::int64_t row = cache_row(q, t, q.position[t]);
    for (int i = 0; i < width; ++i) {
      k_cache[row * width + i] = float_to_bf16(k[static_cast<std::int64_t>(t) * width + i]);
      v_cache[row * width + i] = float_to_bf16(v[static_cast<std::int64_t>(t) * width + i]);
    }
  }
}

void paged_attention_reference(const float* q, PagedQueries pq, int tokens, int heads, int kv_heads, int head_dim,
                               const bf16_t* k_cache, const bf16_t* v_cache, float* out) {
  const int width = kv_heads * head_dim;
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h) {
      const int kvh = h / (heads / kv_heads), positions = pq.position[t] + 1;
      const float* qv = q + (static_cast<std::int64_t>(t) * heads + h) * head_dim;
      std::vector<double> s(static_cast<std::size_t>(positions));
      double m = -INFINITY, sum = 0;
      for (int p = 0; p < positions; ++p) {
        const bf16_t* key = k_cache + cache_row(pq, t, p) * width + kvh * head_dim;
        double dot = 0;
        for (int d = 0; d < head_dim; ++d) dot += static_cast<double>(qv[d]) * bf16_to_float(key[d]);
        s[static_cast<std::size_t>(p)] = dot / std::sqrt(static_cast<double>(head_dim));
        m = std::max(m, s[static_cast<std::size_t>(p)]);
      }
      for (double& x : s) sum += (x = std::exp(x - m));
      for (int d = 0; d < head_dim; ++d) {
        double acc = 0;
        for (int p = 0; p < positions; ++p) acc += s[static_cast<std::size_t>(p)] * bf16_to_float(v_cache[cache_row(pq, t, p) * width + kvh * head_dim + d]);
        out[(static_cast<std::int64_t>(t) * heads + h) * head_dim + d] = static_cast<float>(acc / sum);
      }
    }
}

}  // namespace mosaic::kernels
