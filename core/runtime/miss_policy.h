#pragma once
// What happens when a token routes to an expert no slot serves for its row (Multi-MoE §3.2's miss,
// SwapMoE's masked gating). A policy only decides where missing experts go; the routing plan
// (route_plan.h) loads them, updates the reroute table and groups the work.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/slot_pool.h"

namespace mosaic {

// A slot of a layer's pool or of the shared scratch pool.
struct SlotRef {
  bool scratch = false;
  std::int32_t slot = -1;
  bool operator==(const SlotRef&) const = default;
};

// Where one missing expert is served, and in which wave: scratch slots are reused wave after wave
// when a step misses more experts than there are scratch slots.
struct Placement {
  SlotRef slot;
  int wave = 0;
};

class MissPolicy {
 public:
  virtual ~MissPolicy() = default;
  virtual std::string_view name() const = 0;
  // Masked gating: the router never picks an expert the token's row has no slot for, so nothing is
  // ever loaded (place() is not called).
  virtual bool masks_router() const { return false; }
  // Whether it keeps what it loads in spare slots (which the runtime then sizes from the budget).
  virtual bool keeps_misses() const { return false; }
  // Whether a layer's spare slots are also filled ahead of its routing, with the experts the next
  // layer's router picks on this layer's input (plan_prefetch in route_plan.h).
  virtual bool prefetches() const { return false; }
  // Whether a layer stops being predicted where its predictions have not paid (prefetch_gate.h).
  virtual bool gates_prefetch() const { return false; }
  // Slots for `count` distinct missing experts of one layer's step. `layer` may hand out spare slots
  // with last_use() ≤ `since` (not used by this step); `scratch` slots are dropped after their wave.
  virtual std::vector<Placement> place(std::size_t count, const SlotPool& layer, const SlotPool& scratch,
                                       std::uint64_t since) const = 0;
};

// "transient" (the paper: load, use, drop), "lru" (keep misses in spare slots, least recently used
// evicted first), "prefetch" (lru, and the next layer's likely experts loaded while this layer
// computes, in the layers and steps where that has paid), "prefetch-always" (the same at every layer
// and step: the predictor as it is, for measuring it) or "masked" (SwapMoE: never load; renormalize
// over the resident experts).
// nullptr for another name.
std::unique_ptr<MissPolicy> make_miss_policy(std::string_view name);
const std::vector<std::string_view>& miss_policy_names();
std::string miss_policy_choices();  // "transient, lru, prefetch or masked", for messages

}  // namespace mosaic
