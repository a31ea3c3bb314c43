#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

#include "kernels/router_topk.h"

namespace mosaic::kernels {

void router_topk_reference(const float* logits, int tokens, int experts, int k, bool renormalize,
                           std::int32_t* ids, float* weights) {
  std::vector<float> p(static_cast<std::size_t>(experts));
  std::vector<int> order(static_cast<std::size_t>(experts));
  for (int t = 0; t < tokens; ++t) {
    std::vector<float> row(logits + static_cast<std::ptrdiff_t>(t) * experts, logits + static_cast<std::ptrdiff_t>(t + 1) * experts);
    for (float& x : row) x = std::isnan(x) ? -FLT_MAX : x;  // as the kernel reads it
    const float top = *std::max_element(row.begin(), row.end());
    float sum = 0;
    for (int e = 0; e < experts; ++e) sum += p[e] = std::exp(row[e] - top);
    for (int e = 0; e < experts; ++e) p[e] /= sum;
    for (int e = 0; e < experts; ++e) order[e] = e;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float chosen = 0;
    for (int j = 0; j < k; ++j) chosen += p[order[j]];
    for (int j = 0; j < k; ++j) {
      ids[t * k + j] = order[j];
      weights[t * k + j] = renormalize ? p[order[j]] / chosen : p[order[j]];
    }
  }
}

}  // namespace mosaic::kernels
