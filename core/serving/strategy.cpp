#include "serving/strategy.h"

#include <algorithm>
#include <set>

#include "analysis/layout.h"
#include "analysis/merge.h"
#include "analysis/virtual_plan.h"
#include "common/byte_size.h"
#include "common/text_file.h"
#include "model/tokenizer.h"
#include "runtime/capacity.h"
#include "serving/config_layout.h"
#include "serving/hybrid_plan.h"
#include "serving/layout_planning.h"
#include "serving/layout_serving.h"
#include "common/error.h"

namespace mosaic {
namespace {

// The first `count` of the positions `similar_first` ranks (every one when count < 0), in layer then
// expert order, each holding the copy `owner(rank)` names.
template <class Owner>
std::vector<PinnedExpert> first_ranked(const ModelSpec& s, const std::vector<std::int64_t>& similar_first, std::int64_t count, Owner&& owner) {
  const auto ranked = static_cast<std::int64_t>(similar_first.size());
  const std::int64_t n = count < 0 ? ranked : std::min(count, ranked);
  std::vector<std::pair<std::int64_t, std::int64_t>> kept;  // (position, rank)
  for (std::int64_t r = 0; r < n; ++r) kept.emplace_back(similar_first[static_cast<std::size_t>(r)], r);
  std::sort(kept.begin(), kept.end());
  std::vector<PinnedExpert> out;
  for (const auto& [p, r] : kept) out.push_back({p / s.num_experts, p % s.num_experts, owner(r)});
  return out;
}

// A layout strategy's resident experts: its capacity, or with a budget and none given, what the
// budget holds beside `sets_used` non-expert sets' worth of room (resident_sets auto: capacity.h's
// rule), each copy priced at the dearest (a delta folder's holds its base's weights and its pack).
std::int64_t capacity_of(const StrategyConfig& c, const HostStore& store, int sets_used) {
  if (c.capacity > 0 || !c.budget_bytes) return c.capacity;
  const CapacityPlan plan =
      plan_capacity(store.spec(), store.non_expert_bytes(), store.expert_bytes() + store.max_delta_bytes(), *c.budget_bytes, c.reserve);
  return with_sets_asked(plan, c.resident_sets, sets_used).capacity;
}

// A partition's budget must hold one non-expert set, its pinned experts and the reserve: said in
// experts, which is what a strategy's capacity counts (the runtime would name its first item short).
void check_fits(const std::string& strategy, const HostStore& store, const ReserveSpec& reserve, std::uint64_t budget, std::size_t pins) {
  std::uint64_t reserved = 0;
  for (const ReserveItem& r : plan_reserve(store.spec(), store.expert_bytes(), reserve)) reserved += r.bytes;
  const std::uint64_t floor = store.non_expert_bytes() + reserved, need = floor + static_cast<std::uint64_t>(pins) * store.expert_bytes();
  if (need <= budget) return;
  const std::string fits = budget < floor ? "not even one non-expert set and the reserve (" + format_bytes(floor) + ")"
                                          : std::to_string((budget - floor) / store.expert_bytes()) + " experts";
  throw BudgetError(strategy, "device budget " + format_bytes(budget),
                    "does not hold " + format_bytes(need) + " (one non-expert set, " + std::to_string(pins) + " pinned experts of " +
                        format_bytes(store.expert_bytes()) + ", reserve " + format_bytes(reserved) + "); it holds " + fits,
                    "lower the strategy's capacity, or raise the budget");
}

}  // namespace

RuntimeConfig time_sharing_config(RuntimeConfig base, const ModelSpec& spec) {
  base.hit = HitPolicy::Strict;
  base.whole_model_swaps = true;
  base.resident_sets = 1;
  base.pinned = every_position(spec, 0);
  return base;
}

RuntimeConfig over_base_config(const StrategyConfig& config, const HostStore& store, RuntimeConfig rc,
                               const std::vector<std::int64_t>& similar_first, std::vector<std::string>& targets) {
  // ExpertWeave (esft): every base expert and every adapter's tuned experts pinned. DeltaMoE
  // (delta): every base expert pinned, each delta folder's deltas pinned, packed, in delta-only
  // slots while the budget holds them, the rest loaded on miss. Either way a slot serves the
  // rows whose own expert it holds, so untuned experts are the base's slots.
  // Hybrid: as delta, but the deltas go to the least similar positions first, and a row whose
  // delta is not resident takes the base's copy at its position (a consolidated hit) rather
  // than loading: the most similar positions are consolidated onto the base, as many as the
  // budget needs (and at least `capacity`).
  const ModelSpec& s = store.spec();
  const bool esft = config.kind == StrategyKind::Esft, hybrid = config.kind == StrategyKind::Hybrid;
  targets.clear();
  rc.hit = hybrid ? HitPolicy::Consolidated : HitPolicy::Strict;
  std::vector<int> bases;
  if (hybrid) hybrid_base(store);  // one base's copy is shared: refuse folders over two bases
  for (int t = 0; t < store.targets(); ++t) {
    if (!(esft ? store.is_adapter(t) : store.is_delta(t)) || store.base_of(t) < 0) continue;
    targets.push_back(store.name(t));
    const int b = store.base_of(t);
    if (std::find(bases.begin(), bases.end(), b) == bases.end()) {
      bases.push_back(b);
      // A base expert whose content is pinned in its layer already (a within-model delta
      // folder's medoid base repeats one expert across the layer) needs no slot of its own:
      // the deltas over it find their dense part by content.
      std::set<std::pair<std::int64_t, ExpertId>> held;
      for (const PinnedExpert& p : every_position(s, b))
        if (config.kind != StrategyKind::Delta || held.emplace(p.layer, store.expert(b, p.layer, p.expert)).second) rc.pinned.push_back(p);
    }
    if (esft)
      for (const auto& [l, e] : store.tuned(t)) rc.pinned.push_back({l, e, t});
  }
  if (targets.empty())
    throw InvalidArgument("strategy " + std::string(strategy_name(config.kind)), "variants",
                          esft ? "hold no ESFT adapter whose base is among them" : "hold no delta folder whose base is among them",
                          esft ? "add adapter folders (expert_cfg.json) together with their base_model"
                               : "add delta folders (delta.json, from `mosaic-cli delta compress`) together with their base_model");
  if (!esft) {
    std::vector<int> folders;
    for (const std::string& name : targets) folders.push_back(store.index(name));
    rc.pinned_if_room = hybrid ? deltas_least_similar_first(store, similar_first, folders, config.capacity) : deltas_layer_major(store, folders);
  }
  return rc;
}

// What the one assembly builds on: the store, its MoE positions from the most similar down, and,
// where the weights are at hand, the family, its analysis and a folder for the averaging merge.
struct Deployment::Basis {
  const HostStore& store;
  std::vector<std::int64_t> similar_first;
  const Family* family = nullptr;
  const FamilyAnalysis* analysis = nullptr;
  std::filesystem::path scratch;
  std::shared_ptr<const SimulatedDevice> device;  // none: the config's own device
};

Deployment::Deployment(const StrategyConfig& config, const Family& family, const HostStore& store,
                       const FamilyAnalysis& analysis, const std::filesystem::path& scratch)
    : config_(config) {
  assemble({.store = store, .similar_first = rank_positions(analysis.distances), .family = &family, .analysis = &analysis, .scratch = scratch});
}

Deployment::Deployment(const StrategyConfig& config, const HostStore& store, std::shared_ptr<const SimulatedDevice> device) : config_(config) {
  assemble({.store = store, .similar_first = spread_positions(store.spec()), .device = std::move(device)});
}

void Deployment::assemble(const Basis& b) {
  const StrategyConfig& config = config_;
  const HostStore& store = b.store;
  const ModelSpec& s = store.spec();
  const std::string strategy = "strategy " + std::string(strategy_name(config.kind));
  const int n = store.targets();
  for (int t = 0; t < n; ++t) targets_.push_back(store.name(t));
  // What every partition serves under; a strategy's layout is served within the strategy's budget.
  const ServingChoices choices{.budget = config.budget_bytes, .reserve = config.reserve, .hit = config.hit, .miss = config.miss,
                               .resident_sets = config.resident_sets, .device = config.device, .cpu_weights = config.cpu_weights};
  RuntimeConfig base = served_config(choices);
  base.simulated = b.device;
  // Each partition starts warm: its first request pays only its own swap.
  auto add = [&](const HostStore& on, RuntimeConfig rc, std::vector<std::string> serves, int warm) {
    if (rc.budget_bytes) check_fits(strategy, on, rc.reserve, *rc.budget_bytes, rc.pinned.size());
    auto runtime = std::make_shared<Runtime>(on, std::move(rc));
    const int set = runtime->set_of(warm);
    runtime->make_resident(std::span<const int>(&set, 1));
    partitions_.push_back({std::move(runtime), std::move(serves)});
  };
  auto first = [&](std::int64_t count, auto owner) { return first_ranked(s, b.similar_first, count, owner); };
  auto single_target = [&] {
    const int single = config.single_target.empty() ? 0 : store.index(config.single_target);
    if (single < 0) throw InvalidArgument(strategy, "single_target '" + config.single_target + "'", "is not a variant");
    return single;
  };

  switch (config.kind) {
    case StrategyKind::Consolidated:
    case StrategyKind::NoReconfig: {
      const bool shared = config.kind == StrategyKind::NoReconfig;
      const int sets_used = shared ? 1 : store.sets();
      RuntimeConfig rc = base;
      if (b.family) {  // the planner's layout: ranked by the copies' distances, owners by the policy
        const bool by_budget = config.capacity <= 0 && config.budget_bytes;
        const Layout layout = plan_layout(*b.family, *b.analysis, sets_used,
                                          {.budget = config.budget_bytes, .capacity = by_budget ? std::nullopt : std::optional(config.capacity),
                                           .policy = config.policy, .shares = config.shares, .reserve = config.reserve,
                                           .resident_sets = config.resident_sets})
                                  .layout;
        rc = layout_config(layout, match_layout(layout, *b.family, b.analysis->sha256, "strategy layout"), store, *b.family, choices);
      } else {  // no copies to compare: the spread's first positions, owners in turn
        rc.pinned = first(capacity_of(config, store, sets_used), [n](std::int64_t rank) { return static_cast<int>(rank % n); });
      }
      if (shared) rc.non_expert_of.assign(static_cast<std::size_t>(n), 0);
      add(store, std::move(rc), targets_, 0);
      break;
    }
    case StrategyKind::Single:
    case StrategyKind::SingleResident: {
      const int single = single_target();
      RuntimeConfig rc = base;
      // The paper's single model is offloaded under the same memory as the others: its best-ranked
      // `capacity` positions pinned, misses loaded. single-resident pins all: the upper reference.
      const std::int64_t capacity = config.kind == StrategyKind::Single ? capacity_of(config, store, 1) : 0;
      rc.pinned = capacity > 0 ? first(capacity, [single](std::int64_t) { return single; }) : every_position(s, single);
      for (const std::string& name : targets_) rc.aliases.emplace_back(name, single);
      add(store, std::move(rc), targets_, single);
      break;
    }
    case StrategyKind::TimeSharing:
      add(store, time_sharing_config(base, s), targets_, 0);
      break;
    case StrategyKind::SpaceSharing: {
      // Partition i pins its own copies of the best-ranked capacity/N positions; budget, copy
      // bandwidth and compute are split N ways, as MIG slices a GPU: each step's compute and copies
      // are charged N times over (on the virtual clock as time, on the real one as sleep).
      const std::int64_t share = config.capacity / n;
      for (int i = 0; i < n; ++i) {
        RuntimeConfig rc = base;
        if (config.budget_bytes) rc.budget_bytes = *config.budget_bytes / static_cast<std::uint64_t>(n);
        rc.copy_slowdown = static_cast<double>(n);
        rc.compute_slowdown = static_cast<double>(n);  // MIG: a slice has 1/N of the compute too
        rc.pinned = first(share, [i](std::int64_t) { return i; });
        add(store, std::move(rc), {targets_[static_cast<std::size_t>(i)]}, i);
      }
      break;
    }
    case StrategyKind::Averaging: {
      // The uniform mean of the weights where they are at hand; on shapes alone, the first variant's
      // stand in for it (the merged model has the variants' shapes).
      const HostStore* on = &store;
      if (b.family) {
        const auto dir = b.scratch / "averaged";
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
        write_averaged(*b.family, dir);
        merged_family_ = std::make_unique<Family>();
        merged_family_->add("averaged", dir);
        merged_store_ = std::make_unique<HostStore>(*merged_family_);
        on = merged_store_.get();
      }
      RuntimeConfig rc = base;
      rc.pinned = every_position(s, 0);
      for (const std::string& name : targets_) rc.aliases.emplace_back(name, 0);
      add(*on, std::move(rc), targets_, 0);
      break;
    }
    case StrategyKind::Esft:
    case StrategyKind::Delta:
    case StrategyKind::Hybrid: {
      RuntimeConfig rc = over_base_config(config, store, base, b.similar_first, targets_);
      add(store, std::move(rc), targets_, store.index(targets_.front()));
      break;
    }
    case StrategyKind::VirtualExperts: {
      if (!b.family) {
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
        add(store, std::move(rc), targets_, 0);
        break;
      }
      VirtualPlanOptions o{.reserve = config.reserve, .updates = config.updates};
      Layout layout;
      if (!config.calibration.empty()) {
        if (!config.budget_bytes)
          throw InvalidArgument("strategy virtual-experts", "calibration", "plans counts for a budget", "give the strategy a budget");
        o.budget_bytes = *config.budget_bytes;
        const std::string text = read_text_file(config.calibration, "give a text file in the serving domain");
        const auto ids = Tokenizer::load(b.family->variants().front().checkpoint->tokenizer_file()).encode(text, /*add_special=*/false);
        layout = plan_virtual(*b.family, b.analysis->sha256, store, ids, o, &b.analysis->distances);
      } else {
        layout = uniform_virtual_layout(*b.family, b.analysis->sha256, store, config.capacity, config.budget_bytes, o, &b.analysis->distances);
      }
      add(store, layout_config(layout, store.indices(*b.family), store, *b.family, choices), targets_, 0);
      break;
    }
  }
}

Deployment::~Deployment() = default;

std::size_t Deployment::partition_of(const std::string& target) const {
  for (std::size_t i = 0; i < partitions_.size(); ++i)
    for (const auto& t : partitions_[i].serves)
      if (t == target) return i;
  throw InvalidArgument("strategy " + name(), "target '" + target + "'", "is not a variant being served");
}

}  // namespace mosaic
