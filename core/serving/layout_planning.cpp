#include "serving/layout_planning.h"

#include "analysis/consolidation.h"
#include "common/error.h"
#include "model/checkpoint.h"

#include <algorithm>

namespace mosaic {

int non_expert_sets(const Family& family) {
  int sets = 0;
  for (const Variant& v : family.variants()) {
    const Checkpoint& ck = *v.checkpoint;
    bool own = !ck.is_adapter();
    for (const Weight& w : ck.weights())
      if (!own && !w.expected.is_expert() && w.file->path().parent_path().lexically_normal() != ck.base_dir().lexically_normal()) own = true;
    sets += own;
  }
  return std::max(sets, 1);
}

std::optional<CapacityPlan> budget_plan(const Family& family, int distinct_sets, const LayoutAsk& ask) {
  if (!ask.budget) return std::nullopt;
  return with_sets_asked(plan_capacity(family, *ask.budget, ask.reserve), ask.resident_sets, distinct_sets);
}

PlannedLayout plan_layout(const Family& family, const FamilyAnalysis& analysis, int distinct_sets, const LayoutAsk& ask) {
  if (!ask.budget && !ask.capacity)
    throw InvalidArgument("layout", "budget / capacity", "neither was given", "give a device budget, or the resident experts' count");
  PlannedLayout out{.capacity = budget_plan(family, distinct_sets, ask)};
  std::vector<double> shares = ask.shares;
  if (ask.policy != Policy::Weighted) shares.clear();
  else if (shares.empty()) shares.assign(family.size(), 1.0);  // weighted without shares weighs every variant alike
  const std::int64_t capacity = ask.capacity ? *ask.capacity : out.capacity->capacity;
  out.layout = make_layout(family, analysis.sha256, plan_consolidation(analysis.distances, capacity, ask.policy, shares, ask.layer_caps));
  if (out.capacity) {
    out.layout.budget_bytes = *ask.budget;
    out.layout.reserve = out.capacity->reserve;
    out.layout.reserve_spec = ask.reserve;
  }
  return out;
}

}  // namespace mosaic
