#include <cmath>
#include <vector>

#include "kernels/moe_experts.h"

namespace mosaic::kernels {

void mask_router_reference(float* logits, const std::int32_t* rows, const std::int32_t* table, int tokens, int experts) {
  for (int t = 0; t < tokens; ++t) {
    const std::int32_t* entry = table + static_cast<std::int64_t>(rows[t]) * experts;
    bool any = false;
    for (int e = 0; e < experts; ++e) any |= entry[e] >= 0;
    if (!any) continue;
    for (int e = 0; e < experts; ++e)
      if (entry[e] < 0) logits[t * experts + e] = -INFINITY;
  }
}

void importance_add_reference(const float* h, int hidden, int tokens, int k, const std::int32_t* ids, const float* weights,
                              const std::int32_t* rows, int experts, float* scores) {
  for (int t = 0; t < tokens; ++t) {
    double ss = 0;
    for (int i = 0; i < hidden; ++i) ss += double(h[static_cast<std::int64_t>(t) * hidden + i]) * h[static_cast<std::int64_t>(t) * hidden + i];
    const double norm = std::sqrt(ss);
    for (int j = 0; j < k; ++j) {
      const std::int64_t pair = static_cast<std::int64_t>(t) * k + j;
      if (ids[pair] >= 0) scores[static_cast<std::int64_t>(rows[t]) * experts + ids[pair]] += static_cast<float>(norm * weights[pair]);
    }
  }
}

void moe_experts_reference(const float* x_in, int tokens, int hidden, int inter, int k, const std::int32_t* slot_of,
                           const float* weights, const bf16_t* const* slot_weights, float* x) {
  std::vector<double> act(static_cast<std::size_t>(inter));
  for (int t = 0; t < tokens; ++t) {
    const float* h = x_in + static_cast<std::int64_t>(t) * hidden;
    for (int j = 0; j < k; ++j) {
      const int s = slot_of[t * k + j];
      if (s < 0) continue;
      const bf16_t* w = slot_weights[s];
      for (int r = 0; r < inter; ++r) {
        double g = 0, u = 0;
        for (int i = 0; i < hidden; ++i) {
          g += static_cast<double>(bf16_to_float(w[static_cast<std::int64_t>(r) * hidden + i])) * h[i];
          u += static_cast<double>(bf16_to_float(w[static_cast<std::int64_t>(inter + r) * hidden + i])) * h[i];
        }
        act[static_cast<std::size_t>(r)] = g / (1.0 + std::exp(-g)) * u;
      }
      const bf16_t* down = w + 2 * static_cast<std::int64_t>(inter) * hidden;
      for (int c = 0; c < hidden; ++c) {
        double o = 0;
        for (int r = 0; r < inter; ++r) o += static_cast<double>(bf16_to_float(down[static_cast<std::int64_t>(c) * inter + r])) * act[static_cast<std::size_t>(r)];
        x[static_cast<std::int64_t>(t) * hidden + c] += static_cast<float>(weights[t * k + j] * o);
      }
    }
  }
}

}  // namespace mosaic::kernels
