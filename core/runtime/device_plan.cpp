#include "runtime/device_plan.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "common/error.h"
#include "runtime/miss_policy.h"

namespace mosaic {
namespace {

// A pinned delta expert whose base is pinned in its layer holds only its packed delta; the base's
// slot serves the dense part (DeltaMoE). Not under time-sharing, which reloads every pinned slot.
std::vector<char> delta_only_pins(const HostStore& store, const std::vector<PinnedExpert>& pins, bool whole_model_swaps) {
  std::vector<char> out(pins.size(), 0);
  if (whole_model_swaps) return out;
  std::set<std::pair<std::int64_t, ExpertId>> dense;
  for (const PinnedExpert& p : pins)
    if (const ExpertId id = store.expert(p.target, p.layer, p.expert); store.expert_tensors(id).delta < 0) dense.emplace(p.layer, id);
  for (std::size_t i = 0; i < pins.size(); ++i) {
    const HostExpert& x = store.expert_tensors(store.expert(pins[i].target, pins[i].layer, pins[i].expert));
    out[i] = x.delta >= 0 && dense.count({pins[i].layer, x.dense}) > 0;
  }
  return out;
}

void check_pins(const HostStore& store, const RuntimeConfig& c) {
  const ModelSpec& s = store.spec();
  for (const auto* list : {&c.pinned, &c.pinned_if_room})
    for (const PinnedExpert& p : *list)
      if (p.layer < 0 || p.layer >= s.num_layers || !s.is_sparse(p.layer) || p.expert < 0 || p.expert >= s.num_experts || p.target < 0 ||
          p.target >= store.targets())
        throw InvalidArgument("runtime", "pinned expert",
                              "(layer " + std::to_string(p.layer) + ", expert " + std::to_string(p.expert) + ", target " +
                                  std::to_string(p.target) + ") is not an MoE position of a target");
}

class Charger {
 public:
  explicit Charger(DevicePlan& plan) : plan_(plan) {}
  void operator()(std::uint64_t bytes, std::string name) {
    plan_.budget.reserve(bytes, name);
    plan_.items.push_back({std::move(name), bytes});
  }

 private:
  DevicePlan& plan_;
};

// Decided one pin at a time, as charged: a delta is delta-only when its base is already pinned.
void take_pins_if_room(const HostStore& store, const RuntimeConfig& config, DevicePlan& plan, Charger& charge) {
  if (config.pinned_if_room.empty()) return;
  std::set<std::pair<std::int64_t, ExpertId>> dense;
  for (std::size_t i = 0; i < plan.pinned.size(); ++i)
    if (const PinnedExpert& p = plan.pinned[i]; !plan.delta_only[i]) dense.emplace(p.layer, store.expert(p.target, p.layer, p.expert));
  std::uint64_t bytes = 0;
  std::int64_t taken = 0, packed = 0;
  for (const PinnedExpert& p : config.pinned_if_room) {
    const ExpertId id = store.expert(p.target, p.layer, p.expert);
    const HostExpert& x = store.expert_tensors(id);
    const bool delta_only = x.delta >= 0 && dense.count({p.layer, x.dense}) > 0;
    const std::uint64_t cost = pin_bytes(store, p, delta_only);
    if (config.budget_bytes && plan.budget.available() < bytes + cost) break;
    bytes += cost;
    ++taken;
    packed += delta_only;
    plan.pinned.push_back(p);
    plan.delta_only.push_back(delta_only);
    if (x.delta < 0) dense.emplace(p.layer, id);
  }
  charge(bytes, "pinned while room (" + std::to_string(taken) + " of " + std::to_string(config.pinned_if_room.size()) + ", " +
                    std::to_string(packed) + " packed deltas)");
}

}  // namespace

std::uint64_t pin_bytes(const HostStore& store, const PinnedExpert& p, bool delta_only) {
  const HostExpert& x = store.expert_tensors(store.expert(p.target, p.layer, p.expert));
  const std::uint64_t packed = x.delta >= 0 ? store.delta(x.delta).bytes() : 0;
  return delta_only ? packed : store.expert_bytes() + packed;
}

DevicePlan plan_device(const HostStore& store, const RuntimeConfig& config, const MissPolicy& policy) {
  check_pins(store, config);
  const ModelSpec& s = store.spec();
  DevicePlan plan{.budget = DeviceBudget(config.budget_bytes.value_or(DeviceBudget::kUnlimited))};
  Charger charge(plan);
  const std::uint64_t ne = store.non_expert_bytes(), eb = store.expert_bytes();
  const bool limited = config.budget_bytes.has_value();

  charge(ne, "non-expert weights of one variant");
  plan.pinned = config.pinned;
  plan.delta_only = delta_only_pins(store, config.pinned, config.whole_model_swaps);
  const auto layers = static_cast<std::size_t>(s.num_layers);
  std::vector<std::int64_t> pinned(layers, 0), deltas(layers, 0);
  std::vector<std::uint64_t> pinned_bytes(layers, 0), delta_bytes(layers, 0);
  for (std::size_t i = 0; i < plan.pinned.size(); ++i) {
    const auto l = static_cast<std::size_t>(plan.pinned[i].layer);
    ++(plan.delta_only[i] ? deltas : pinned)[l];
    (plan.delta_only[i] ? delta_bytes : pinned_bytes)[l] += pin_bytes(store, plan.pinned[i], plan.delta_only[i]);
  }
  for (std::size_t l = 0; l < layers; ++l) {
    if (pinned[l] > 0) charge(pinned_bytes[l], "expert slots of layer " + std::to_string(l) + " (" + std::to_string(pinned[l]) + " pinned)");
    if (deltas[l] > 0)
      charge(delta_bytes[l], "delta-only slots of layer " + std::to_string(l) + " (" + std::to_string(deltas[l]) + " packed deltas)");
  }
  // Miss and spare slots may be handed any expert, so each has room for the largest packed delta.
  plan.slot_bytes = eb + store.max_delta_bytes();
  for (const ReserveItem& r : plan_reserve(s, plan.slot_bytes, config.reserve)) {
    charge(r.bytes, r.name + " (" + r.detail + ")");
    if (r.name == "kv cache") plan.kv_bytes = r.bytes;
    if (r.name == "miss slots") plan.scratch = plan.slot_bytes ? static_cast<std::int64_t>(r.bytes / plan.slot_bytes) : 0;
  }
  if (plan.scratch < 1 && !policy.masks_router())
    throw InvalidArgument("runtime", "miss slots", "are 0, and a miss needs a slot to load into",
                          "reserve one or more (--miss-slots; a layout planned with none serves under --miss masked)");
  take_pins_if_room(store, config, plan, charge);
  if (config.virtual_experts && config.virtual_experts->staging > 0) {
    // Virtual experts' updates copy into these while steps run on the resident ones.
    plan.spare = config.virtual_experts->staging;
    for (std::int64_t l = 0; l < s.num_layers; ++l)
      if (s.is_sparse(l))
        charge(static_cast<std::uint64_t>(plan.spare) * plan.slot_bytes, "staging slots of layer " + std::to_string(l) + " (" + std::to_string(plan.spare) + ")");
  }
  // Auto: as many as the targets use (one for no-reconfig's shared set and whole-model swaps).
  int wanted = config.resident_sets;
  if (wanted == RuntimeConfig::kAutoSets) {
    std::vector<int> used;
    for (int t = 0; t < store.targets() && !config.whole_model_swaps; ++t) {
      const int set = store.set_of(config.non_expert_of.empty() ? t : config.non_expert_of[static_cast<std::size_t>(t)]);
      if (std::find(used.begin(), used.end(), set) == used.end()) used.push_back(set);
    }
    wanted = std::max<int>(1, static_cast<int>(used.size()));
  }
  while (plan.sets < wanted && (!limited || plan.budget.available() >= ne)) {
    charge(ne, "non-expert weights of resident set " + std::to_string(plan.sets + 1));
    ++plan.sets;
  }
  if (policy.keeps_misses()) {
    const std::int64_t cap = s.num_experts * store.targets();
    const std::int64_t sparse = std::max<std::int64_t>(1, s.num_sparse_layers());
    plan.spare = limited ? std::min(cap, static_cast<std::int64_t>(plan.budget.available() / std::max<std::uint64_t>(plan.slot_bytes, 1)) / sparse)
                         : cap;
    if (plan.spare > 0)
      for (std::int64_t l = 0; l < s.num_layers; ++l)
        if (s.is_sparse(l))
          charge(static_cast<std::uint64_t>(plan.spare) * plan.slot_bytes,
                 "spare slots of layer " + std::to_string(l) + " (" + std::to_string(plan.spare) + ")");
  }
  plan.layer_pinned.assign(layers, 0);
  plan.layer_deltas.assign(layers, 0);
  for (std::size_t i = 0; i < plan.pinned.size(); ++i)
    ++(plan.delta_only[i] ? plan.layer_deltas : plan.layer_pinned)[static_cast<std::size_t>(plan.pinned[i].layer)];
  return plan;
}

}  // namespace mosaic
