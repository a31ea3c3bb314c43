#pragma once
// How many experts a memory budget holds (Multi-MoE §3.1): what is left of the budget after one
// variant's non-expert weights and an itemized reserve, divided by the bytes of one expert.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/family.h"

namespace mosaic {

// What the reserve must hold while serving. Defaults suit one chat session of a 4K context.
struct ReserveSpec {
  std::int64_t context_tokens = 4096;  // KV cache length of each request (at most the model's context)
  std::int64_t requests = 1;           // requests holding a KV cache at once
  std::int64_t prefill_chunk = 512;    // tokens per forward step: sizes the activation workspace
  std::int64_t miss_slots = -1;        // expert slots kept free for on-demand loads; -1: top_k
  std::int64_t kv_bytes = 2;           // bytes per cached K/V element (bf16)
};

struct ReserveItem {
  std::string name;    // "kv cache", "activations", "miss slots"
  std::uint64_t bytes = 0;
  std::string detail;  // how it was computed, for people to check
};

struct CapacityPlan {
  std::uint64_t budget_bytes = 0;
  std::uint64_t non_expert_bytes = 0;   // one variant's resident non-expert weights
  std::uint64_t bytes_per_expert = 0;
  std::vector<ReserveItem> reserve;
  std::int64_t positions = 0;           // MoE positions: sparse layers × experts
  std::int64_t capacity = 0;            // resident experts, in [0, positions]
  std::uint64_t pinned_floor = 0;       // experts pinned at any budget (hybrid: the base at every position)
  int sets = 1;                         // non-expert sets the plan leaves room for (with_sets)
  std::int64_t positions_for_sets = 0;  // the positions given up for the sets beyond the first

  std::uint64_t reserve_bytes() const;
  std::uint64_t minimum_budget() const;  // throws InvalidArgument when the sum passes 64 bits
};

std::vector<ReserveItem> plan_reserve(const ModelSpec& spec, std::uint64_t bytes_per_expert, const ReserveSpec& r);

// The device byte model every part prices memory with (the planner, the runtime, the workbench):
// one variant's non-expert set and one routed expert as stored in the checkpoints (the device holds
// the stored dtype), the largest over the family's variants.
struct DeviceBytes {
  std::uint64_t non_expert = 0, per_expert = 0;
  std::uint64_t max_packed_delta = 0;  // the largest delta folder pack (0: none in the family)
};
DeviceBytes device_bytes(const Family& family);

// C = ⌊(budget − non-expert − reserve) / bytes per expert⌋ clamped to [0, positions]. Throws
// BudgetError stating the minimum when the budget does not cover non-expert bytes plus reserve.
CapacityPlan plan_capacity(const ModelSpec& spec, std::uint64_t non_expert_bytes, std::uint64_t bytes_per_expert,
                           std::uint64_t budget_bytes, const ReserveSpec& reserve = {});
// The same for a family: the largest variant's non-expert bytes, and per expert (pinned or in a miss
// slot) the largest expert plus, in a family with delta folders, the largest packed delta.
CapacityPlan plan_capacity(const Family& family, std::uint64_t budget_bytes, const ReserveSpec& reserve = {});

// The budget a family starts from when none is given: its minimum (one non-expert set and the
// reserve) and half of its MoE positions resident. `unlimited`: a plan at a budget that bounds nothing.
std::uint64_t half_resident_budget(const CapacityPlan& unlimited);

// Resident non-expert sets under `resident_sets: auto` for a layout planned from a budget: one more
// than the first when the targets use two sets or more and it costs at most 1/kSetShare of the
// expert positions the budget holds with one set (a set costs ⌈set bytes / expert bytes⌉
// positions); with two, a swap overlaps decode instead of stalling it. More sets only from what the
// layout leaves. `with_sets` is the plan with room kept for `sets` of them: its capacity less the
// positions they cost (never below 0).
constexpr std::int64_t kSetShare = 8;
int planned_sets(const CapacityPlan& one_set, int distinct_sets);
CapacityPlan with_sets(CapacityPlan one_set, int sets);
// `resident_sets` as a config asks it: kAutoSets (planned_sets' choice) or K, at most the
// `distinct_sets` the targets use; the plan with room kept for them.
constexpr int kAutoSets = 0;
CapacityPlan with_sets_asked(const CapacityPlan& one_set, int asked, int distinct_sets);

// The three tiers a family's weights live in. The device holds what the plan keeps there (its
// budget, at most); host RAM the distinct bytes the host tier keeps (runtime/host_tier.h: every one
// without a host budget); disk the rest, read on demand. A device byte is a copy of a host byte, so
// `ram + disk == distinct`.
struct TierBytes {
  std::uint64_t device = 0, ram = 0, disk = 0, distinct = 0;
};
TierBytes tier_bytes(std::uint64_t distinct_bytes, std::uint64_t device_bytes, std::optional<std::uint64_t> host_budget);
// What a plan keeps on the device: one non-expert set, its resident experts and its reserve.
std::uint64_t planned_device_bytes(const CapacityPlan& plan);

// Number of MoE positions of a spec, and a capacity given directly, clamped to it.
std::int64_t moe_positions(const ModelSpec& spec);
std::int64_t clamp_capacity(std::int64_t capacity, const ModelSpec& spec);

}  // namespace mosaic
