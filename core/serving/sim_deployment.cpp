// A strategy as a Deployment on a simulated device, for a family known by its config files alone
// (strategy.h, sim_family.h). What is resident is the strategy's, as Deployment's other constructor makes it
// from a family's distances; with none, resident positions are taken in the even spread over the
// MoE layers (config_layout.h), and the runtime then sizes what the budget leaves (more sets, lru's
// spares, the KV blocks) and the engine decides every step, as they do when serving.
#include <algorithm>

#include "analysis/virtual_plan.h"
#include "common/byte_size.h"
#include "common/error.h"
#include "runtime/capacity.h"
#include "runtime/sim_backend.h"
#include "serving/config_layout.h"
#include "serving/strategy.h"

namespace mosaic {
namespace {

// The first `count` positions of the even spread (every position when count < 0), the copy at each
// taken from `owner(rank)`.
template <class Owner>
std::vector<PinnedExpert> spread(const ModelSpec& s, std::int64_t count, Owner&& owner) {
  const std::vector<std::int64_t> order = spread_positions(s);
  const std::int64_t n = count < 0 ? static_cast<std::int64_t>(order.size()) : std::min(count, static_cast<std::int64_t>(order.size()));
  std::vector<PinnedExpert> out;
  for (std::int64_t r = 0; r < n; ++r) {
    const std::int64_t p = order[static_cast<std::size_t>(r)];
    out.push_back({p / s.num_experts, p % s.num_experts, owner(r)});
  }
  return out;
}

// As Deployment's: a layout strategy's capacity, or with a budget and none given, what the budget
// holds beside room for the sets resident_sets asks (auto: capacity.h's rule).
std::int64_t capacity_of(const StrategyConfig& c, const HostStore& store, int sets_used) {
  if (c.capacity > 0 || !c.budget_bytes) return c.capacity;
  return with_sets_asked(plan_capacity(store.spec(), store.non_expert_bytes(), store.expert_bytes(), *c.budget_bytes, c.reserve),
                         c.resident_sets, sets_used)
      .capacity;
}

// A partition's budget must hold one non-expert set, its pinned experts and the reserve: said in
// experts, which is what a strategy's capacity counts (the runtime would name its first item short).
void check_fits(const std::string& strategy, const HostStore& store, const ReserveSpec& reserve, std::uint64_t budget, std::uint64_t pinned_bytes,
                std::size_t pins) {
  std::uint64_t reserved = 0;
  for (const ReserveItem& r : plan_reserve(store.spec(), store.expert_bytes(), reserve)) reserved += r.bytes;
  const std::uint64_t floor = store.non_expert_bytes() + reserved, need = floor + pinned_bytes;
  if (need <= budget) return;
  const std::string fits = budget < floor ? "not even one non-expert set and the reserve (" + format_bytes(floor) + ")"
                                          : std::to_string((budget - floor) / store.expert_bytes()) + " experts";
  throw BudgetError(strategy, "budget " + format_bytes(budget),
                    "does not hold " + format_bytes(need) + " (one non-expert set, " + std::to_string(pins) + " pinned experts of " +
                        format_bytes(store.expert_bytes()) + ", reserve " + format_bytes(reserved) + "); it holds " + fits,
                    "lower the strategy's capacity, or raise the budget");
}

}  // namespace

Deployment::Deployment(const StrategyConfig& config, const HostStore& store, std::shared_ptr<const SimulatedDevice> device) : config_(config) {
  const ModelSpec& s = store.spec();
  const std::string strategy = "strategy " + std::string(strategy_name(config.kind));
  const int n = store.targets();
  for (int t = 0; t < n; ++t) targets_.push_back(store.name(t));
  RuntimeConfig base{.hit = config.hit, .miss = config.miss, .resident_sets = config.resident_sets, .budget_bytes = config.budget_bytes,
                     .reserve = config.reserve, .simulated = std::move(device)};
  // Each partition starts warm: its first request pays only its own swap.
  auto add = [&](RuntimeConfig rc, std::vector<std::string> serves, int warm) {
    const std::uint64_t pinned_bytes = static_cast<std::uint64_t>(rc.pinned.size()) * store.expert_bytes();
    if (rc.budget_bytes) check_fits(strategy, store, rc.reserve, *rc.budget_bytes, pinned_bytes, rc.pinned.size());
    auto runtime = std::make_shared<Runtime>(store, std::move(rc));
    const int set = runtime->set_of(warm);
    runtime->make_resident(std::span<const int>(&set, 1));
    partitions_.push_back({std::move(runtime), std::move(serves)});
  };
  auto round_robin = [n](std::int64_t rank) { return static_cast<int>(rank % n); };

  switch (config.kind) {
    case StrategyKind::Consolidated:
    case StrategyKind::NoReconfig: {
      const bool shared = config.kind == StrategyKind::NoReconfig;
      RuntimeConfig rc = base;
      rc.pinned = spread(s, capacity_of(config, store, shared ? 1 : n), round_robin);
      if (shared) rc.non_expert_of.assign(static_cast<std::size_t>(n), 0);
      add(std::move(rc), targets_, 0);
      break;
    }
    case StrategyKind::Single:
    case StrategyKind::SingleResident:
    case StrategyKind::Averaging: {  // the merged model has the variants' shapes: one model serving all
      int single = 0;
      if (config.kind != StrategyKind::Averaging && !config.single_target.empty()) {
        single = store.index(config.single_target);
        if (single < 0) throw InvalidArgument(strategy, "single_target '" + config.single_target + "'", "is not a variant");
      }
      const std::int64_t capacity = config.kind == StrategyKind::Single ? capacity_of(config, store, 1) : 0;
      RuntimeConfig rc = base;
      rc.pinned = spread(s, capacity > 0 ? capacity : -1, [single](std::int64_t) { return single; });
      for (const std::string& name : targets_) rc.aliases.emplace_back(name, single);
      add(std::move(rc), targets_, single);
      break;
    }
    case StrategyKind::TimeSharing:
      add(time_sharing_config(base, s), targets_, 0);
      break;
    case StrategyKind::SpaceSharing:
      for (int i = 0; i < n; ++i) {
        RuntimeConfig rc = base;
        if (config.budget_bytes) rc.budget_bytes = *config.budget_bytes / static_cast<std::uint64_t>(n);
        rc.copy_slowdown = rc.compute_slowdown = static_cast<double>(n);
        rc.pinned = spread(s, config.capacity / n, [i](std::int64_t) { return i; });
        add(std::move(rc), {targets_[static_cast<std::size_t>(i)]}, i);
      }
      break;
    case StrategyKind::Esft:
    case StrategyKind::Delta:
    case StrategyKind::Hybrid: {
      RuntimeConfig rc = over_base_config(config, store, base, spread_positions(s), targets_);
      add(std::move(rc), targets_, store.index(targets_.front()));
      break;
    }
    case StrategyKind::VirtualExperts: {
      // Uniform counts, as uniform_virtual_layout plans them without a calibration text: the
      // capacity (or what the budget holds) over every variant's MoE layers, each variant's first
      // experts resident at first; the updates then move the sets to where the drawn traffic goes.
      if (!config.calibration.empty())
        throw UnsupportedError(strategy, "calibration", "is not simulated: counts planned on a text need the weights' perplexities",
                               "leave calibration out (uniform counts), or run it on the virtual or the real clock");
      const std::int64_t capacity = capacity_of(config, store, n);
      const std::int64_t count = capacity > 0 ? uniform_virtual_count(s, capacity, n) : s.num_experts;
      RuntimeConfig rc = base;
      for (int t = 0; t < n; ++t)
        for (std::int64_t l = 0; l < s.num_layers; ++l)
          if (s.is_sparse(l))
            for (std::int64_t e = 0; e < count; ++e) rc.pinned.push_back({l, e, t});
      rc.hit = HitPolicy::Strict;
      rc.miss = "masked";
      rc.reserve.miss_slots = 0;
      rc.virtual_experts = config.updates;
      add(std::move(rc), targets_, 0);
      break;
    }
  }
}

}  // namespace mosaic
