#include "forge/esft_selection.h"

#include <algorithm>
#include <numeric>

namespace mosaic {

std::map<std::int64_t, std::vector<std::int64_t>> select_esft_experts(const RouterStats& stats, const std::string& criterion,
                                                                      double threshold) {
  const auto& relevance = criterion == "token" ? stats.token_ratio : stats.gate_score;
  std::map<std::int64_t, std::vector<std::int64_t>> chosen;
  for (std::size_t l = 0; l < relevance.size(); ++l) {
    const auto& r = relevance[l];
    const double total = std::accumulate(r.begin(), r.end(), 0.0);
    std::vector<std::int64_t> order(r.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return r[static_cast<std::size_t>(a)] > r[static_cast<std::size_t>(b)]; });
    double share = 0;
    auto& ids = chosen[static_cast<std::int64_t>(l)];
    for (std::int64_t e : order) {
      ids.push_back(e);
      share += total > 0 ? r[static_cast<std::size_t>(e)] / total : 0;
      if (share >= threshold) break;
    }
    std::sort(ids.begin(), ids.end());
  }
  return chosen;
}

}  // namespace mosaic
