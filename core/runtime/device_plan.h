#pragma once
// What a runtime holds under its budget, decided before anything is allocated: the byte model the
// Runtime charges, apart from the Runtime so that a planner can price a device budget this machine
// could not hold (`consolidate --policy hybrid` plans a GPU's layout on a laptop).
#include <cstdint>
#include <vector>

#include "runtime/runtime.h"

namespace mosaic {

struct DevicePlan {
  DeviceBudget budget;
  std::vector<DeviceItem> items;      // in the order charged
  std::vector<PinnedExpert> pinned;   // config.pinned, then the pinned_if_room the budget held
  std::vector<char> delta_only;       // [pinned]: holds only a packed delta, its base pinned in another slot
  std::vector<std::int64_t> layer_pinned, layer_deltas;  // per layer: dense slots, delta-only slots
  int sets = 1;                       // resident non-expert sets
  std::int64_t spare = 0;             // per MoE layer, for a miss policy that keeps misses
  std::int64_t scratch = 0;           // miss slots
  std::uint64_t kv_bytes = 0;         // the KV cache's reservation
  std::uint64_t slot_bytes = 0;       // a slot that may be handed any expert: dense and the largest delta
};

// In the planner's order (analysis/capacity.h): one non-expert set, the pinned experts, the reserve,
// the pins while room; whatever is left holds more resident sets, then `policy`'s spares. Throws
// InvalidArgument for a pin that is not an MoE position of a target, BudgetError naming the first
// item that does not fit.
DevicePlan plan_device(const HostStore& store, const RuntimeConfig& config, const MissPolicy& policy);

// The bytes one pin takes: its packed delta alone when delta-only, else a dense slot (which holds a
// delta expert's base and its Δ).
std::uint64_t pin_bytes(const HostStore& store, const PinnedExpert& p, bool delta_only);

}  // namespace mosaic
