#pragma once
// Similarity-based consolidation (Multi-MoE §3.1): rank the MoE positions by ascending position
// distance and keep one shared copy resident at the first C of them. Which variant's copy is kept
// is the policy: the paper's round-robin, or (beyond it) the medoid copy or traffic-weighted turns.
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "analysis/expert_distance.h"

namespace mosaic {

enum class Policy {
  RoundRobin,  // rank order, first-ranked to the first variant, then the next, …
  Medoid,      // each resident position keeps the copy closest to all the others
  Weighted,    // turns follow expected traffic shares: variant i gets ≈ shares[i] · C positions
  Hybrid,      // delta folders over one base: the base's copy everywhere, and the folders' packed deltas
               // at the least similar positions, as many as the budget holds (serving/hybrid_plan.h)
  Virtual,     // SwapMoE's virtual experts: per-layer counts planned on calibration text, an initial set
               // that the runtime changes with the traffic (analysis/virtual_plan.h)
};

std::string_view policy_name(Policy p);  // "round-robin", "medoid", "weighted", "hybrid", "virtual"
std::optional<Policy> parse_policy(std::string_view name);

struct ConsolidationPlan {
  std::int64_t layers = 0, experts = 0, variants = 0;
  std::int64_t capacity = 0;      // resident positions (already clamped)
  Policy policy = Policy::RoundRobin;
  std::vector<double> shares;     // Weighted: normalized traffic shares per variant; else empty
  std::vector<int> map;           // [layers * experts]: variant whose copy is resident, -1 if none
  std::vector<std::int64_t> rank; // [layers * experts]: 0-based rank by ascending d; -1 in dense layers
  std::vector<double> distance;   // [layers * experts]: d(l, e); NaN in dense layers
  std::vector<std::int64_t> deltas;  // Hybrid: [layers * experts], how many delta folders' deltas are
                                     // resident there (the first ones in the layout's variant order); else empty

  int resident(std::int64_t layer, std::int64_t expert) const { return map[layer * experts + expert]; }
  std::vector<std::int64_t> resident_counts() const;  // per variant
};

// Positions in rank order: ascending d, ties by layer then expert; dense layers left out.
std::vector<std::int64_t> rank_positions(const ExpertDistances& d);

// `capacity` is clamped to [0, MoE positions]. Weighted needs one positive share per variant
// (normalized here); the others ignore shares. Throws InvalidArgument for bad shares, for Hybrid,
// which is planned from the deltas' bytes (serving/hybrid_plan.h), and for Virtual, planned from
// calibration text (analysis/virtual_plan.h), neither from a capacity.
// `layer_caps` (empty: none): the most positions a layer may keep — a family changed while it serves
// is re-planned into the slots its runtime holds, the positions taken in rank order past full layers.
ConsolidationPlan plan_consolidation(const ExpertDistances& d, std::int64_t capacity, Policy policy,
                                     std::span<const double> shares = {}, std::span<const std::int64_t> layer_caps = {});

}  // namespace mosaic
