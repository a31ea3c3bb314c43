#include "analysis/consolidation.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.h"

namespace mosaic {
namespace {

// The variant whose copy has the least summed distance to the other copies; the lowest index on ties.
int medoid(const ExpertDistances& d, std::int64_t layer, std::int64_t expert) {
  int best = 0;
  double best_sum = INFINITY;
  for (std::int64_t i = 0; i < d.variants; ++i) {
    double sum = 0;
    for (std::int64_t j = 0; j < d.variants; ++j)
      if (j != i) sum += d.pair(i, j, layer, expert);
    if (sum < best_sum) best_sum = sum, best = static_cast<int>(i);
  }
  return best;
}

std::vector<double> normalized_shares(std::span<const double> shares, std::int64_t variants) {
  if (static_cast<std::int64_t>(shares.size()) != variants)
    throw InvalidArgument("weighted policy", "shares",
                          std::to_string(shares.size()) + " shares given for " + std::to_string(variants) + " variants",
                          "give one traffic share per variant, in the variants' order");
  double total = 0;
  for (double s : shares) {
    if (!(s > 0) || !std::isfinite(s))
      throw InvalidArgument("weighted policy", "shares", "holds " + std::to_string(s), "shares must be positive numbers");
    total += s;
  }
  std::vector<double> out(shares.begin(), shares.end());
  for (double& s : out) s /= total;
  return out;
}

}  // namespace

std::string_view policy_name(Policy p) {
  switch (p) {
    case Policy::RoundRobin: return "round-robin";
    case Policy::Medoid: return "medoid";
    case Policy::Weighted: return "weighted";
    case Policy::Hybrid: return "hybrid";
    case Policy::Virtual: return "virtual";
  }
  return "?";
}

std::optional<Policy> parse_policy(std::string_view name) {
  for (Policy p : {Policy::RoundRobin, Policy::Medoid, Policy::Weighted, Policy::Hybrid, Policy::Virtual})
    if (name == policy_name(p)) return p;
  return std::nullopt;
}

std::vector<std::int64_t> ConsolidationPlan::resident_counts() const {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(variants), 0);
  for (int v : map)
    if (v >= 0) ++counts[static_cast<std::size_t>(v)];
  return counts;
}

std::vector<std::int64_t> rank_positions(const ExpertDistances& d) {
  std::vector<std::int64_t> order;
  for (std::int64_t p = 0; p < d.layers * d.experts; ++p)
    if (!std::isnan(d.position[static_cast<std::size_t>(p)])) order.push_back(p);
  // Position index p = layer * experts + expert, so ties by index are ties by layer, then expert.
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return d.position[static_cast<std::size_t>(a)] < d.position[static_cast<std::size_t>(b)];
  });
  return order;
}

ConsolidationPlan plan_consolidation(const ExpertDistances& d, std::int64_t capacity, Policy policy,
                                     std::span<const double> shares, std::span<const std::int64_t> layer_caps) {
  if (policy == Policy::Hybrid)
    throw InvalidArgument("policy", "hybrid", "is planned from the delta folders' packed bytes under a budget, not from a capacity",
                          "open delta folders with their base in the workbench and pick hybrid, or serve them with the hybrid strategy");
  if (policy == Policy::Virtual)
    throw InvalidArgument("policy", "virtual", "is planned from calibration text under a budget, not from a capacity",
                          "run mosaic-cli plan-virtual, or pick virtual experts in the workbench");
  ConsolidationPlan plan;
  plan.layers = d.layers;
  plan.experts = d.experts;
  plan.variants = d.variants;
  plan.policy = policy;
  plan.distance = d.position;
  if (policy == Policy::Weighted) plan.shares = normalized_shares(shares, d.variants);
  const std::size_t cells = static_cast<std::size_t>(d.layers * d.experts);
  plan.map.assign(cells, -1);
  plan.rank.assign(cells, -1);

  const std::vector<std::int64_t> order = rank_positions(d);
  plan.capacity = std::clamp<std::int64_t>(capacity, 0, static_cast<std::int64_t>(order.size()));
  if (!layer_caps.empty() && static_cast<std::int64_t>(layer_caps.size()) != d.layers)
    throw InvalidArgument("layer caps", std::to_string(layer_caps.size()) + " entries", "the model has " + std::to_string(d.layers) + " layers");
  std::vector<std::int64_t> given(static_cast<std::size_t>(d.variants), 0);
  std::vector<std::int64_t> taken_in(static_cast<std::size_t>(d.layers), 0);
  std::int64_t taken = 0;  // positions kept: their rank order, less those a full layer passed over
  for (std::size_t r = 0; r < order.size(); ++r) {
    const std::int64_t p = order[r];
    plan.rank[static_cast<std::size_t>(p)] = static_cast<std::int64_t>(r);
    const auto layer = static_cast<std::size_t>(p / d.experts);
    if (taken >= plan.capacity || (!layer_caps.empty() && taken_in[layer] >= layer_caps[layer])) continue;
    ++taken_in[layer];
    const std::int64_t turn = taken++;
    int v = 0;
    switch (policy) {
      case Policy::RoundRobin: v = static_cast<int>(turn % d.variants); break;
      case Policy::Medoid: v = medoid(d, p / d.experts, p % d.experts); break;
      case Policy::Weighted: {
        // The variant furthest behind its share of the positions given so far takes this one; with
        // equal shares this is exactly round-robin.
        double best = -INFINITY;
        for (std::int64_t i = 0; i < d.variants; ++i) {
          const double deficit = plan.shares[static_cast<std::size_t>(i)] * static_cast<double>(turn + 1) -
                                 static_cast<double>(given[static_cast<std::size_t>(i)]);
          if (deficit > best + 1e-12) best = deficit, v = static_cast<int>(i);
        }
        break;
      }
      case Policy::Hybrid:
      case Policy::Virtual: break;  // refused above
    }
    ++given[static_cast<std::size_t>(v)];
    plan.map[static_cast<std::size_t>(p)] = v;
  }
  plan.capacity = taken;  // less than asked where the layers' caps hold fewer
  return plan;
}

}  // namespace mosaic
