#include "serving/layout_serving.h"

#include "analysis/virtual_plan.h"
#include "runtime/device_plan.h"
#include "serving/hybrid_plan.h"

namespace mosaic {

std::optional<std::uint64_t> layout_budget(const Layout& layout, const HostStore& store, const Family& family,
                                           const std::vector<int>& to_store, const ReserveSpec& reserve) {
  if (layout.budget_bytes || layout.plan.policy != Policy::Hybrid) return layout.budget_bytes;
  // No budget in the file: the hybrid's floor and the deltas the file pins, whatever they are.
  std::uint64_t budget = hybrid_floor(store, family, reserve).minimum_budget();
  for (const PinnedExpert& p : hybrid_pins(store, layout, to_store))
    if (store.is_delta(p.target)) budget += pin_bytes(store, p, true);
  return budget;
}

RuntimeConfig served_config(const ServingChoices& c) {
  RuntimeConfig config;
  config.hit = c.hit;
  config.miss = c.miss;
  config.resident_sets = c.resident_sets;
  config.device = c.device;
  config.cpu_weights = c.cpu_weights;
  config.budget_bytes = c.budget;
  config.reserve = c.reserve;
  return config;
}

LayoutTerms layout_terms(const Layout& layout, const std::vector<int>& to_store, const HostStore& store, const Family& family,
                         const ServingChoices& c) {
  if (c.budget) return {c.budget, c.reserve};
  ReserveSpec reserve = layout.reserve_spec.value_or(c.reserve);
  if (c.own_miss_slots) reserve.miss_slots = c.reserve.miss_slots;
  return {layout_budget(layout, store, family, to_store, reserve), reserve};
}

RuntimeConfig layout_config(const Layout& layout, const std::vector<int>& to_store, const HostStore& store, const Family& family,
                            const ServingChoices& choices) {
  RuntimeConfig config = served_config(choices);
  const LayoutTerms terms = layout_terms(layout, to_store, store, family, choices);
  config.budget_bytes = terms.budget;
  config.reserve = terms.reserve;
  pin_layout(config, layout, to_store, store);
  return config;
}

void pin_layout(RuntimeConfig& config, const Layout& layout, const std::vector<int>& to_store, const HostStore& store) {
  switch (layout.plan.policy) {
    case Policy::Virtual:
      apply_virtual_layout(config, layout, to_store, store);  // its initial set, masked gating, updates
      return;
    case Policy::Hybrid:
      // Rows without their delta resident take the base's copy under consolidated hits (the default).
      config.pinned = hybrid_pins(store, layout, to_store);
      return;
    default:
      config.pinned = pinned_from_layout(layout, to_store);
  }
}

}  // namespace mosaic
