#include "serving/config_layout.h"

#include <cmath>
#include <limits>

#include "common/error.h"

namespace mosaic {

std::vector<std::int64_t> spread_positions(const ModelSpec& s) {
  std::vector<std::int64_t> sparse;
  for (std::int64_t l = 0; l < s.num_layers; ++l)
    if (s.is_sparse(l)) sparse.push_back(l);
  const std::int64_t layers = static_cast<std::int64_t>(sparse.size());
  std::vector<std::int64_t> order;
  order.reserve(static_cast<std::size_t>(layers * s.num_experts));
  // Round k takes expert k of every layer, starting one layer further on each round: a partial
  // round's extras fall on different layers, and turns taken in rank order alternate within a layer.
  for (std::int64_t r = 0; r < layers * s.num_experts; ++r) {
    const std::int64_t round = r / layers, layer = (r % layers + round) % layers;
    order.push_back(sparse[static_cast<std::size_t>(layer)] * s.num_experts + round);
  }
  return order;
}

ConfigLayout plan_config_layout(const SimFamily& family, std::uint64_t budget_bytes, Policy policy, const ReserveSpec& reserve,
                                std::span<const double> shares) {
  if (policy == Policy::Medoid)
    throw InvalidArgument("policy", "medoid", "keeps the copy closest to the others, which needs the experts' weights; a family "
                                              "opened from config.json files has none",
                          "plan round-robin or weighted, or open the checkpoints");
  const ModelSpec& s = family.shapes.spec;
  ConfigLayout out;
  if (budget_bytes == 0)  // none given: the family's own start, half its positions resident
    budget_bytes = half_resident_budget(plan_capacity(s, family.shapes.non_expert_bytes(), family.shapes.expert_bytes(),
                                                      std::numeric_limits<std::uint64_t>::max() / 4, reserve));
  out.capacity = plan_capacity(s, family.shapes.non_expert_bytes(), family.shapes.expert_bytes(), budget_bytes, reserve);
  // The spread's rank as the "distance" the planner orders by; shown as none.
  ExpertDistances order;
  order.layers = s.num_layers;
  order.experts = s.num_experts;
  order.variants = static_cast<std::int64_t>(family.targets.size());
  order.position.assign(static_cast<std::size_t>(s.num_layers * s.num_experts), std::numeric_limits<double>::quiet_NaN());
  const std::vector<std::int64_t> spread = spread_positions(s);
  for (std::size_t r = 0; r < spread.size(); ++r) order.position[static_cast<std::size_t>(spread[r])] = static_cast<double>(r);
  out.plan = plan_consolidation(order, out.capacity.capacity, policy, shares);
  std::fill(out.plan.distance.begin(), out.plan.distance.end(), std::numeric_limits<double>::quiet_NaN());
  return out;
}

}  // namespace mosaic
