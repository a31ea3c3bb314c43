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

namespace mosaic::kernels {

bool router_rule_valid(const RouterRule& r, int experts, int k) {
  if (k <= 0 || k > experts) return false;
  if (r.groups == GroupRank::None) return true;
  return r.n_group >= 1 && r.n_group <= kRouterMaxGroups && experts % r.n_group == 0 && r.topk_group >= 1 &&
         r.topk_group <= r.n_group && r.topk_group * (experts / r.n_group) >= k;
}

void router_choice_reference(const float* logits, int tokens, int experts, int k, const RouterRule& r, std::int32_t* ids,
                             float* weights) {
  const auto E = static_cast<std::size_t>(experts);
  std::vector<float> weigh(E), rank(E);
  std::vector<int> order(E);
  const int per_group = r.groups == GroupRank::None ? experts : experts / r.n_group;
  for (int t = 0; t < tokens; ++t) {
    const float* row = logits + static_cast<std::ptrdiff_t>(t) * experts;
    const std::int32_t* entry = r.table ? r.table + static_cast<std::ptrdiff_t>(r.rows[t]) * experts : nullptr;
    const bool masking = entry && std::any_of(entry, entry + experts, [](std::int32_t x) { return x >= 0; });
    auto masked = [&](int e) { return masking && entry[e] < 0; };
    auto logit = [&](int e) { return std::isnan(row[e]) ? -FLT_MAX : row[e]; };
    if (r.scores == RouterScores::Softmax) {
      float top = -INFINITY;
      for (int e = 0; e < experts; ++e) top = std::max(top, masked(e) ? -INFINITY : logit(e));
      float sum = 0;
      for (int e = 0; e < experts; ++e) sum += weigh[e] = masked(e) ? 0.0f : std::exp(logit(e) - top);
      for (int e = 0; e < experts; ++e) rank[e] = weigh[e] /= sum;
    } else {
      for (int e = 0; e < experts; ++e) {
        weigh[e] = 1.0f / (1.0f + std::exp(-logit(e)));
        rank[e] = masked(e) ? -INFINITY : weigh[e] + (r.bias ? r.bias[e] : 0.0f);
      }
    }
    if (r.groups != GroupRank::None) {
      std::vector<float> score(static_cast<std::size_t>(r.n_group));
      for (int g = 0; g < r.n_group; ++g) {
        float first = -INFINITY, second = -INFINITY;
        for (int e = g * per_group; e < (g + 1) * per_group; ++e) {
          if (rank[e] > first) {
            second = first;
            first = rank[e];
          } else if (rank[e] > second) {
            second = rank[e];
          }
        }
        score[static_cast<std::size_t>(g)] = r.groups == GroupRank::BestScore ? first : first + second;
      }
      std::vector<int> groups(static_cast<std::size_t>(r.n_group));
      for (int g = 0; g < r.n_group; ++g) groups[g] = g;
      std::stable_sort(groups.begin(), groups.end(), [&](int a, int b) { return score[a] > score[b]; });
      std::vector<char> kept(static_cast<std::size_t>(r.n_group), 0);
      for (int i = 0; i < r.topk_group; ++i) kept[groups[i]] = 1;
      for (int e = 0; e < experts; ++e)
        if (!kept[e / per_group]) {
          if (r.scores == RouterScores::Softmax) rank[e] = weigh[e] = 0.0f;  // V2: out of the pool, at 0
          else rank[e] = -INFINITY;
        }
    }
    for (int e = 0; e < experts; ++e) order[e] = e;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int a, int b) { return rank[a] > rank[b] || (rank[a] == rank[b] && a < b); });
    float chosen = 0;
    for (int j = 0; j < k; ++j) chosen += weigh[order[j]];
    if (r.scores == RouterScores::Sigmoid) chosen += 1e-20f;
    for (int j = 0; j < k; ++j) {
      ids[t * k + j] = order[j];
      const float w = r.renormalize ? weigh[order[j]] / chosen : weigh[order[j]];
      weights[t * k + j] = w * r.scale;
    }
  }
}

}  // namespace mosaic::kernels
