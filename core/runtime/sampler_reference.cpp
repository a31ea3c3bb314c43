#include "runtime/sampler_reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace mosaic {

std::int64_t FullSortSampler::next(std::span<const float> logits) {
  if (params_.temperature <= 0) return std::max_element(logits.begin(), logits.end()) - logits.begin();
  sorted_.clear();
  for (std::size_t i = 0; i < logits.size(); ++i) sorted_.emplace_back(logits[i], static_cast<std::int64_t>(i));
  std::sort(sorted_.begin(), sorted_.end(), [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  if (params_.top_k > 0 && static_cast<std::size_t>(params_.top_k) < sorted_.size()) sorted_.resize(static_cast<std::size_t>(params_.top_k));
  weights_.clear();
  double sum = 0;
  for (const auto& [l, i] : sorted_) sum += weights_.emplace_back(std::exp((static_cast<double>(l) - sorted_.front().first) / params_.temperature));
  std::size_t n = sorted_.size();
  if (params_.top_p < 1) {
    double mass = 0;
    for (n = 0; n < sorted_.size();)
      if ((mass += weights_[n++] / sum) >= params_.top_p) break;
  }
  const double total = std::accumulate(weights_.begin(), weights_.begin() + static_cast<std::ptrdiff_t>(n), 0.0);
  double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (std::size_t i = 0; i < n; ++i) {
    if (u < weights_[i]) return sorted_[i].second;
    u -= weights_[i];
  }
  return sorted_[n - 1].second;
}

}  // namespace mosaic
