#include "serving/hybrid_plan.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "analysis/consolidation.h"
#include "analysis/layout.h"
#include "common/error.h"
#include "runtime/device_plan.h"

namespace mosaic {
namespace {

bool has_delta(const HostStore& store, int target, std::int64_t layer, std::int64_t expert) {
  return store.source(target, layer, expert).kind == ExpertSource::Kind::Delta;
}

}  // namespace

std::vector<int> delta_folders_over(const HostStore& store, int base) {
  std::vector<int> out;
  for (int t = 0; t < store.targets(); ++t)
    if (store.is_delta(t) && store.base_of(t) >= 0 && (base < 0 || store.base_of(t) == base)) out.push_back(t);
  return out;
}

int hybrid_base(const HostStore& store) {
  const std::vector<int> folders = delta_folders_over(store);
  if (folders.empty())
    throw InvalidArgument("hybrid", "variants", "hold no delta folder whose base is among them",
                          "add delta folders (delta.json, from `mosaic-cli delta compress`) together with their base_model");
  const int base = store.base_of(folders.front());
  for (int t : folders)
    if (store.base_of(t) != base)
      throw InvalidArgument("hybrid", "variants", "hold delta folders over two bases ('" + store.name(base) + "' and '" + store.name(store.base_of(t)) + "')",
                            "a hybrid layout shares one base's copy: open the folders of one base");
  return base;
}

std::vector<PinnedExpert> deltas_least_similar_first(const HostStore& store, const ExpertDistances& d, const std::vector<int>& folders,
                                                     std::int64_t shared) {
  return deltas_least_similar_first(store, rank_positions(d), folders, shared);
}

std::vector<PinnedExpert> deltas_least_similar_first(const HostStore& store, const std::vector<std::int64_t>& order, const std::vector<int>& folders,
                                                     std::int64_t shared) {
  const std::int64_t experts = store.spec().num_experts;
  std::vector<PinnedExpert> out;
  for (std::size_t r = order.size(); r-- > static_cast<std::size_t>(std::clamp<std::int64_t>(shared, 0, static_cast<std::int64_t>(order.size())));) {
    const std::int64_t l = order[r] / experts, e = order[r] % experts;
    for (int t : folders)
      if (has_delta(store, t, l, e)) out.push_back({l, e, t});
  }
  return out;
}

RuntimeConfig hybrid_planning_config(const HostStore& store, const ExpertDistances& d, std::uint64_t budget, const ReserveSpec& reserve) {
  const int base = hybrid_base(store);
  RuntimeConfig c;
  c.pinned = every_position(store.spec(), base);
  c.pinned_if_room = deltas_least_similar_first(store, d, delta_folders_over(store, base));
  c.hit = HitPolicy::Consolidated;
  c.budget_bytes = budget;
  c.reserve = reserve;
  return c;
}

std::vector<std::int64_t> resident_deltas(const HostStore& store, const std::vector<PinnedExpert>& pinned) {
  const ModelSpec& s = store.spec();
  std::vector<std::int64_t> out(static_cast<std::size_t>(s.num_layers * s.num_experts), 0);
  for (const PinnedExpert& p : pinned)
    if (store.is_delta(p.target) && has_delta(store, p.target, p.layer, p.expert)) ++out[static_cast<std::size_t>(p.layer * s.num_experts + p.expert)];
  return out;
}

ConsolidationPlan hybrid_plan_from(const HostStore& store, const ExpertDistances& d, int base_index, const std::vector<PinnedExpert>& pinned) {
  ConsolidationPlan p = plan_consolidation(d, 0, Policy::RoundRobin);  // ranks and distances
  p.policy = Policy::Hybrid;
  for (std::size_t i = 0; i < p.map.size(); ++i)
    if (p.rank[i] >= 0) {
      p.map[i] = base_index;
      ++p.capacity;
    }
  p.deltas = resident_deltas(store, pinned);
  return p;
}

std::vector<PinnedExpert> hybrid_pins(const HostStore& store, const Layout& layout, const std::vector<int>& to_store) {
  std::vector<PinnedExpert> out = pinned_from_layout(layout, to_store);
  const ConsolidationPlan& p = layout.plan;
  if (p.deltas.empty()) return out;
  const int base = hybrid_base(store);
  // The layout's order decides which folders' deltas a cell's count means, whatever order the
  // folders were opened in this time.
  std::vector<int> folders;
  for (int t : to_store)
    if (store.is_delta(t) && store.base_of(t) == base) folders.push_back(t);
  for (std::int64_t l = 0; l < p.layers; ++l)
    for (std::int64_t e = 0; e < p.experts; ++e) {
      const auto at = static_cast<std::size_t>(l * p.experts + e);
      if (p.rank[at] < 0) continue;  // a dense layer
      // Rows without their delta take the resident copy: under a hybrid that must be the base's.
      const int resident = p.resident(l, e);
      if (resident < 0 || to_store[static_cast<std::size_t>(resident)] != base)
        throw MismatchError("layout", "map", "holds no copy of the delta folders' base ('" + store.name(base) + "') at layer " +
                                                 std::to_string(l) + ", expert " + std::to_string(e) +
                                                 "; a hybrid layout keeps the base at every position",
                            "plan the layout again for these folders");
      const std::int64_t want = p.deltas[at];
      if (want == 0) continue;
      std::int64_t taken = 0;
      for (int t : folders)
        if (taken < want && has_delta(store, t, l, e)) {
          out.push_back({l, e, t});
          ++taken;
        }
      if (taken < want)
        throw MismatchError("layout", "deltas", "asks for " + std::to_string(want) + " deltas at layer " + std::to_string(l) + ", expert " +
                                                    std::to_string(e) + "; the delta folders have " + std::to_string(taken) + " there",
                            "plan the layout again for these folders");
    }
  return out;
}

void priced_as_hybrid(CapacityPlan& cap, const HostStore& store, std::int64_t positions, const ReserveSpec& reserve) {
  cap.reserve = plan_reserve(store.spec(), store.expert_bytes() + store.max_delta_bytes(), reserve);
  cap.capacity = positions;
  cap.pinned_floor = static_cast<std::uint64_t>(positions) * store.expert_bytes();
}

CapacityPlan hybrid_floor(const HostStore& store, const Family& family, const ReserveSpec& reserve) {
  CapacityPlan cap = plan_capacity(family, std::numeric_limits<std::uint64_t>::max() / 4, reserve);
  priced_as_hybrid(cap, store, cap.positions, reserve);
  return cap;
}

std::uint64_t packed_delta_bytes(const HostStore& store, int base) {
  std::uint64_t bytes = 0;
  for (const PinnedExpert& p : deltas_layer_major(store, delta_folders_over(store, base))) bytes += pin_bytes(store, p, true);
  return bytes;
}

}  // namespace mosaic
