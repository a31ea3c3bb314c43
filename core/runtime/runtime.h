#pragma once
// The multi-variant runtime (Multi-MoE Algorithm 2 on the CPU backend): one variant's non-expert
// weights resident at a time, the layout's shared expert copies pinned in per-layer slot pools,
// reroute tables from (target, expert) to slots, and a miss policy that loads a target's own
// expert from the host store when no slot serves it. Single-threaded: the Engine serializes use.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "analysis/layout.h"
#include "runtime/device_budget.h"
#include "runtime/forward.h"
#include "runtime/generation.h"
#include "runtime/host_store.h"
#include "runtime/policies.h"
#include "runtime/reconfigurer.h"
#include "runtime/reroute_table.h"
#include "runtime/slot_pool.h"

namespace mosaic {

struct RuntimeOptions {
  HitPolicy hit = HitPolicy::Consolidated;
  MissPolicy miss = MissPolicy::Transient;
  // nullopt: the device holds exactly the non-expert set, the layout's experts and the miss slots,
  // and KV caches are counted but not limited.
  std::optional<std::uint64_t> budget_bytes;
  std::int64_t miss_slots = -1;         // per MoE layer: scratch (transient) or at least this many spares (lru); -1: top_k
  std::int64_t kv_reserve_tokens = 4096; // with a budget and lru: KV room kept before spares take the rest
  // Strategy knobs (serving/strategy): the paper's baselines are these settings of one runtime.
  bool swap_non_expert = true;  // false (no-reconfig): layout variant 0's non-expert set stays resident
  bool follow_target = false;   // time-sharing: the pinned slots hold the requested variant's own experts,
                                // all reloaded (and counted as swap) when the variant changes
  double copy_slowdown = 1.0;   // space-sharing: each copy takes this many times as long, as if the
                                // host-to-device bandwidth were split that many ways
};

// Per MoE layer, per routed (token, expert) pair: served from a slot (hit) or not (miss), and the
// loads misses caused.
struct LayerCounts {
  std::int64_t hits = 0, misses = 0, loads = 0;
  std::uint64_t load_bytes = 0;
  double load_seconds = 0;
};

struct RuntimeCounters {
  std::vector<LayerCounts> layers;  // [num_layers]; dense layers stay zero
  std::int64_t swaps = 0;
  std::uint64_t swap_bytes = 0;
  double swap_seconds = 0;

  LayerCounts total() const;
};

class Runtime {
 public:
  // `layout` must be matched to the family the store was built from (match_layout); `to_store[i]`
  // is layout variant i's index in the store. Throws BudgetError when the layout does not fit.
  Runtime(const HostStore& store, const Layout& layout, const std::vector<int>& to_store, RuntimeOptions options = {});
  ~Runtime();

  const HostStore& store() const { return store_; }
  const RuntimeOptions& options() const { return options_; }
  const DeviceBudget& budget() const { return budget_; }
  const SlotPool& slots(std::int64_t layer) const { return *pools_[static_cast<std::size_t>(layer)]; }
  const RerouteTable& reroute(std::int64_t layer) const { return *tables_[static_cast<std::size_t>(layer)]; }
  int resident_variant() const { return reconfigurer_.resident(); }

  // Makes `target`'s non-expert weights resident (a no-op when they are) and records the swap.
  void reconfigure(int target, RuntimeCounters& counters);
  // forward() for `target`: reconfigures, then routes every expert through the slots.
  Logits forward(int target, KvCache& cache, std::span<const std::int64_t> ids, LogitsFor which, RuntimeCounters& counters);
  // generate() for `target`, its KV cache reserved from the budget for the request's length.
  GenerationResult generate(int target, const GenerationRequest& request, RuntimeCounters& counters,
                            const TokenCallback& on_token = {});
  RuntimeCounters new_counters() const;

 private:
  const HostStore& store_;
  RuntimeOptions options_;
  DeviceBudget budget_;
  Reconfigurer reconfigurer_;
  std::vector<std::unique_ptr<SlotPool>> pools_;      // [num_layers]; null in dense layers
  std::vector<std::unique_ptr<RerouteTable>> tables_; // [num_layers]; null in dense layers
  std::uint64_t slot_bytes_ = 0;
  int expert_owner_ = -1;  // follow_target: whose experts the pinned slots hold

  double throttle(double copy_seconds) const;  // copy_slowdown: waits out the rest, returns the total
  void reload_pinned(int target, RuntimeCounters& counters);
};

}  // namespace mosaic
