// CPU references of transformer_ops.h, written for clarity: the baseline each kernel is checked against.
#include <algorithm>
#include <cmath>

#include "kernels/transformer_ops.h"

namespace mosaic::kernels {

void embed_rows_reference(const bf16_t* table, const std::int32_t* ids, int tokens, int width, float* out) {
  for (int t = 0; t < tokens; ++t)
    for (int i = 0; i < width; ++i) out[t * width + i] = bf16_to_float(table[static_cast<std::int64_t>(ids[t]) * width + i]);
}

void rms_norm_reference(const float* x, const bf16_t* w, int rows, int width, float eps, float* out) {
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < width; ++i) ss += static_cast<double>(x[r * width + i]) * x[r * width + i];
    const float scale = 1.0f / std::sqrt(static_cast<float>(ss / width) + eps);
    for (int i = 0; i < width; ++i) out[r * width + i] = bf16_to_float(w[i]) * (x[r * width + i] * scale);
  }
}

void rope_reference(float* x, const float* cos, const float* sin, int tokens, int heads, int head_dim) {
  const int half = head_dim / 2;
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * head_dim;
      const float* c = cos + t * head_dim;
      const float* s = sin + t * head_dim;
      for (int d = 0; d < half; ++d) {
        const float a = v[d], b = v[d + half];
        v[d] = a * c[d] - b * s[d];
        v[d + half] = b * c[d + half] + a * s[d + half];
      }
    }
}

void silu_mul_reference(const float* gate, const float* up, int rows, int width, float* out) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < width; ++c) {
      const float g = up ? gate[r * width + c] : gate[r * 2 * width + c];
      const float u = up ? up[r * width + c] : gate[r * 2 * width + width + c];
      out[r * width + c] = g / (1.0f + std::exp(-g)) * u;
    }
}

void clamp_reference(float* x, std::int64_t n, float limit) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = std::clamp(x[i], -limit, limit);
}

void add_gated_reference(float* x, const float* y, const float* gate, int rows, int width) {
  for (int r = 0; r < rows; ++r) {
    const float s = gate ? 1.0f / (1.0f + std::exp(-gate[r])) : 1.0f;
    for (int c = 0; c < width; ++c) x[r * width + c] += s * y[r * width + c];
  }
}

}  // namespace mosaic::kernels
