#include "serving/sim_deployment.h"

#include <algorithm>

#include "runtime/capacity.h"
#include "common/byte_size.h"
#include "common/error.h"
#include "serving/config_layout.h"

namespace mosaic {
namespace {

// The first `count` positions in the even spread; every position when count < 0.
std::vector<std::vector<char>> spread(const ModelSpec& s, std::int64_t count) {
  std::vector<std::vector<char>> pinned(static_cast<std::size_t>(s.num_layers), std::vector<char>(static_cast<std::size_t>(s.num_experts), 0));
  const std::vector<std::int64_t> order = spread_positions(s);
  const std::int64_t n = count < 0 ? static_cast<std::int64_t>(order.size()) : std::min(count, static_cast<std::int64_t>(order.size()));
  for (std::int64_t r = 0; r < n; ++r) {
    const std::int64_t p = order[static_cast<std::size_t>(r)];
    pinned[static_cast<std::size_t>(p / s.num_experts)][static_cast<std::size_t>(p % s.num_experts)] = 1;
  }
  return pinned;
}

std::int64_t pinned_count(const SimPartition& p) {
  std::int64_t n = 0;
  for (const auto& layer : p.pinned) n += std::count(layer.begin(), layer.end(), 1);
  return n;
}

// As the engine's Deployment: a layout strategy's capacity, or with a budget and none given, what the
// budget holds beside room for the sets resident_sets asks (auto: capacity.h's rule).
std::int64_t capacity_of(const StrategyConfig& c, const ModelShapes& m, int sets_used) {
  if (c.capacity > 0 || !c.budget_bytes) return c.capacity;
  return with_sets_asked(plan_capacity(m.spec, m.non_expert_bytes(), m.expert_bytes(), *c.budget_bytes, c.reserve), c.resident_sets, sets_used)
      .capacity;
}

}  // namespace

std::vector<SimPartition> simulated_deployment(const StrategyConfig& c, const ModelShapes& m, const std::vector<std::string>& names,
                                               const DeviceProfile& d, HostMemory host) {
  const ModelSpec& s = m.spec;
  const std::string strategy = "strategy " + std::string(strategy_name(c.kind));
  if (c.miss.starts_with("prefetch"))
    throw UnsupportedError(strategy, "miss '" + c.miss + "'",
                           "is not simulated: the routing model draws each layer's experts apart, so there is no next-layer "
                           "choice to predict from this layer's",
                           "simulate lru, or run prefetch on the virtual or the real clock");
  const int n = static_cast<int>(names.size());
  std::vector<int> all(static_cast<std::size_t>(n));
  for (int t = 0; t < n; ++t) all[static_cast<std::size_t>(t)] = t;
  SimPartition base;
  base.serves = all;
  base.set_of = all;
  base.resident_sets = c.resident_sets;
  base.set_bytes = m.non_expert_bytes();
  base.set_bandwidth = host.non_expert_pinned ? d.h2d_pinned : d.h2d_pageable;
  base.expert_bandwidth = host.experts_pinned ? d.h2d_pinned : d.h2d_pageable;
  base.miss = c.miss;
  base.scheduler = c.scheduler;
  std::vector<SimPartition> parts;
  switch (c.kind) {
    case StrategyKind::Consolidated:
    case StrategyKind::NoReconfig:
      base.pinned = spread(s, capacity_of(c, m, c.kind == StrategyKind::NoReconfig ? 1 : n));
      if (c.kind == StrategyKind::NoReconfig) std::fill(base.set_of.begin(), base.set_of.end(), 0);
      parts.push_back(base);
      break;
    case StrategyKind::Single:
    case StrategyKind::SingleResident:
    case StrategyKind::Averaging: {
      int single = 0;
      if (c.kind != StrategyKind::Averaging && !c.single_target.empty()) {
        const auto at = std::find(names.begin(), names.end(), c.single_target);
        if (at == names.end()) throw InvalidArgument(strategy, "single_target '" + c.single_target + "'", "is not a variant");
        single = static_cast<int>(at - names.begin());
      }
      const std::int64_t capacity = c.kind == StrategyKind::Single ? capacity_of(c, m, 1) : 0;
      base.pinned = spread(s, capacity > 0 ? capacity : -1);
      std::fill(base.set_of.begin(), base.set_of.end(), single);
      base.warm_set = single;
      parts.push_back(base);
      break;
    }
    case StrategyKind::TimeSharing:
      base.pinned = spread(s, -1);
      base.resident_sets = 1;
      base.set_bytes = m.non_expert_bytes() + static_cast<std::uint64_t>(moe_positions(s)) * m.expert_bytes();
      parts.push_back(base);
      break;
    case StrategyKind::SpaceSharing:
      for (int i = 0; i < n; ++i) {
        SimPartition p = base;
        p.serves = {i};
        p.warm_set = i;
        p.pinned = spread(s, c.capacity / n);
        p.copy_slowdown = p.compute_slowdown = static_cast<double>(n);
        parts.push_back(std::move(p));
      }
      break;
    default:
      throw UnsupportedError(strategy, "clock 'simulated'", "is not simulated: the simulator models layouts, swaps and misses, not adapters, deltas or virtual experts",
                             "run it on the virtual or the real clock");
  }
  // The budget, in the runtime's order; what it leaves holds more sets, then spares.
  std::uint64_t reserve = 0;
  for (const ReserveItem& r : plan_reserve(s, m.expert_bytes(), c.reserve)) reserve += r.bytes;
  const std::int64_t sparse = s.num_sparse_layers();
  for (SimPartition& p : parts) {
    if (p.resident_sets == RuntimeConfig::kAutoSets) {  // every set its targets use
      std::vector<int> used;
      for (int t : p.serves)
        if (std::find(used.begin(), used.end(), p.set_of[static_cast<std::size_t>(t)]) == used.end()) used.push_back(p.set_of[static_cast<std::size_t>(t)]);
      p.resident_sets = std::max<int>(1, static_cast<int>(used.size()));
    }
    const std::int64_t pins = pinned_count(p);
    // Time-sharing's set is the whole model: its experts are what the set holds beyond the non-expert weights.
    const std::uint64_t pinned_bytes =
        c.kind == StrategyKind::TimeSharing ? p.set_bytes - m.non_expert_bytes() : static_cast<std::uint64_t>(pins) * m.expert_bytes();
    // Look-ahead swaps unless the config says, as the engine decides (Engine::make_scheduler).
    auto decide_ahead = [&] {
      if (!p.scheduler.swap_ahead) p.scheduler.swap_ahead = p.resident_sets >= 2 && p.copy_slowdown == 1.0 && c.kind != StrategyKind::TimeSharing;
    };
    if (!c.budget_bytes) {
      p.spare = s.num_experts * n;  // unbounded: every miss is kept
      decide_ahead();
      continue;
    }
    const std::uint64_t budget = *c.budget_bytes / (c.kind == StrategyKind::SpaceSharing ? static_cast<std::uint64_t>(n) : 1);
    const std::uint64_t need = m.non_expert_bytes() + pinned_bytes + reserve;
    if (need > budget) {
      const std::uint64_t floor = m.non_expert_bytes() + reserve;
      const std::string fits = budget < floor ? "not even one non-expert set and the reserve (" + format_bytes(floor) + ")"
                                              : std::to_string((budget - floor) / m.expert_bytes()) + " experts";
      throw BudgetError(strategy, "budget " + format_bytes(budget),
                        "does not hold " + format_bytes(need) + " (one non-expert set, " + std::to_string(pins) + " pinned experts of " +
                            format_bytes(m.expert_bytes()) + ", reserve " + format_bytes(reserve) + "); it holds " + fits,
                        "lower the strategy's capacity, or raise the budget");
    }
    std::uint64_t left = budget - need;
    const int more = static_cast<int>(std::min<std::uint64_t>(static_cast<std::uint64_t>(std::max(p.resident_sets - 1, 0)), left / p.set_bytes));
    p.resident_sets = 1 + more;
    decide_ahead();
    left -= static_cast<std::uint64_t>(more) * p.set_bytes;
    p.spare = p.miss == "lru" && sparse > 0 ? static_cast<std::int64_t>(left / (m.expert_bytes() * static_cast<std::uint64_t>(sparse))) : 0;
    // The KV reserve: context (at most the model's, as plan_reserve counts it) × requests positions, in blocks.
    const std::int64_t context = s.max_position_embeddings > 0 ? std::min(c.reserve.context_tokens, s.max_position_embeddings) : c.reserve.context_tokens;
    p.kv_blocks = (context * c.reserve.requests + p.kv_block_tokens - 1) / p.kv_block_tokens;
  }
  return parts;
}

}  // namespace mosaic
