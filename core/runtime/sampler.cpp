#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace mosaic {

Sampler::Sampler(SamplingParams p) : params_(p), rng_(p.seed) {
  if (!(p.top_p > 0.0 && p.top_p <= 1.0))
    throw InvalidArgument("sampling", "top_p", "must be in (0, 1], got " + std::to_string(p.top_p));
  if (p.top_k < 0) throw InvalidArgument("sampling", "top_k", "must not be negative");
  if (!std::isfinite(p.temperature) || p.temperature < 0)
    throw InvalidArgument("sampling", "temperature", "must be 0 (greedy) or positive, got " + std::to_string(p.temperature));
}

std::int64_t Sampler::next(std::span<const float> logits) {
  if (logits.empty()) throw InvalidArgument("sampling", "logits", "are empty");
  if (params_.temperature <= 0.0)
    return std::max_element(logits.begin(), logits.end()) - logits.begin();

  // Softmax at the temperature over the candidates, most probable first.
  scratch_.clear();
  for (std::size_t i = 0; i < logits.size(); ++i) scratch_.emplace_back(logits[i], static_cast<std::int64_t>(i));
  std::size_t keep = scratch_.size();
  if (params_.top_k > 0) keep = std::min<std::size_t>(keep, static_cast<std::size_t>(params_.top_k));
  std::partial_sort(scratch_.begin(), scratch_.begin() + static_cast<std::ptrdiff_t>(keep), scratch_.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  scratch_.resize(keep);
  const double top = scratch_.front().first;
  std::vector<double> p(keep);
  double sum = 0;
  for (std::size_t i = 0; i < keep; ++i) sum += p[i] = std::exp((scratch_[i].first - top) / params_.temperature);

  // Nucleus: keep the shortest prefix whose mass reaches top_p (at least one token).
  double mass = 0;
  std::size_t n = 0;
  while (n < keep) {
    mass += p[n++] / sum;
    if (mass >= params_.top_p) break;
  }
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) total += p[i];
  double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (std::size_t i = 0; i < n; ++i) {
    if (u < p[i]) return scratch_[i].second;
    u -= p[i];
  }
  return scratch_[n - 1].second;
}

}  // namespace mosaic
