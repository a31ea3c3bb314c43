#pragma once
// One MoE layer's routed (token, k) pairs turned into work over slots, before any expert runs: each
// pair looked up in the reroute table through its token's row; the distinct experts that miss
// placed by the miss policy, their loads listed and the table updated for the slots a policy keeps;
// then the pairs grouped by slot, wave by wave (scratch slots are reused from one wave to the next).
// Backend-independent: the CPU backend executes a plan with ATen, the CUDA backend with its kernels.
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/host_store.h"
#include "runtime/miss_policy.h"
#include "runtime/recent_experts.h"
#include "runtime/reroute_table.h"
#include "runtime/slot_pool.h"
#include "runtime/step.h"

namespace mosaic {

enum class PairOutcome : std::int8_t { Hit, Miss, Dropped };  // Dropped: masked gating gave it no slot

struct ExpertLoad {
  SlotRef slot;
  ExpertId content = -1;
  ExpertSource source;
  std::int64_t pair = -1;  // the first pair that needed it (its token's request is charged the load)
};

struct SlotGroup {
  SlotRef slot;
  std::vector<std::int64_t> pairs;  // token * k + j, ascending
};

struct RouteWave {
  std::vector<ExpertLoad> loads;  // copied in before the wave's groups run
  std::vector<SlotGroup> groups;
};

struct RoutePlan {
  std::vector<RouteWave> waves;      // at least one
  std::vector<PairOutcome> outcome;  // [tokens * k]
  std::vector<std::int64_t> ahead_used;  // pairs that were first to hit a slot filled by a prefetch
};

// One layer's slots and what fills them.
struct LayerSlots {
  std::int64_t layer = 0;
  RerouteTable& table;
  SlotPool& pool;
  SlotPool& scratch;
  const HostStore& store;
  const MissPolicy& policy;
  RecentExperts* recent = nullptr;  // where each miss is recorded against its target, when set
};

// `experts` [tokens * k]: each token's top-k expert ids; `rows` [tokens]: each token's reroute row
// (its target). Updates the pools' use times and what they hold, and the table.
RoutePlan plan_routes(const LayerSlots& slots, std::span<const std::int64_t> experts, std::int64_t k,
                      std::span<const int> rows);

// The prefetch policy's loads into `slots` before its layer routes, from `predicted` [tokens * k]:
// the top-k its router gives the tokens' input to the layer before. Each distinct expert a token's
// row would miss goes to a spare slot, least recently used first — never over a slot a prediction
// hits, never to scratch (what does not fit is left to miss) — and the table and pool are updated as
// for a kept miss, the slots marked ahead. ExpertLoad::pair is the predicted pair.
std::vector<ExpertLoad> plan_prefetch(const LayerSlots& slots, std::span<const std::int64_t> predicted, std::int64_t k,
                                      std::span<const int> rows);

// Adds each pair's hit or miss (and each prefetch it used) to the counts of `layer` of its token's
// sequence: `sequence` [tokens] is the caller's sequence index of each token, `counts` [sequences][layers].
void count_outcomes(const RoutePlan& plan, std::int64_t k, std::span<const int> sequence, std::int64_t layer,
                    std::vector<std::vector<LayerCounts>>& counts);

// Appends to `routes[s]` where each pair of every token of a traced sequence s went (`traced`
// [sequences]; `first` [sequences]: each sequence's first token in the step), and whose copy served
// it. Call after plan_routes, with the slots it planned over.
void trace_routes(const RoutePlan& plan, const LayerSlots& slots, std::span<const std::int64_t> experts, std::int64_t k,
                  std::span<const int> sequence, std::span<const std::int64_t> first, std::span<const char> traced,
                  std::vector<std::vector<RoutedExpert>>& routes);

}  // namespace mosaic
