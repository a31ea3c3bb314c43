#include "runtime/recent_experts.h"

#include <algorithm>

namespace mosaic {

RecentExperts::RecentExperts(int targets, int distinct_experts)
    : experts_(distinct_experts), stamp_(static_cast<std::size_t>(targets) * static_cast<std::size_t>(distinct_experts), 0) {}

void RecentExperts::missed(int target, ExpertId expert) {
  if (target < 0 || expert < 0) return;
  const std::size_t at = static_cast<std::size_t>(target) * static_cast<std::size_t>(experts_) + static_cast<std::size_t>(expert);
  if (at < stamp_.size()) stamp_[at] = ++clock_;
}

std::vector<ExpertId> RecentExperts::latest(int target, std::size_t most) const {
  std::vector<std::pair<std::uint64_t, ExpertId>> seen;
  const std::size_t first = static_cast<std::size_t>(target) * static_cast<std::size_t>(experts_);
  if (target < 0 || first >= stamp_.size()) return {};
  for (int e = 0; e < experts_; ++e)
    if (const std::uint64_t s = stamp_[first + static_cast<std::size_t>(e)]) seen.emplace_back(s, e);
  const std::size_t n = std::min(most, seen.size());
  std::partial_sort(seen.begin(), seen.begin() + static_cast<std::ptrdiff_t>(n), seen.end(), std::greater<>());
  std::vector<ExpertId> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(seen[i].second);
  return out;
}

}  // namespace mosaic
