#include "serving/strategy.h"

#include <algorithm>
#include <set>

#include "analysis/layout.h"
#include "analysis/merge.h"
#include "analysis/virtual_plan.h"
#include "common/text_file.h"
#include "model/tokenizer.h"
#include "serving/hybrid_plan.h"
#include "serving/layout_planning.h"
#include "serving/layout_serving.h"
#include "common/error.h"

namespace mosaic {
namespace {

// `owner`'s copy at every MoE position that `pick(rank)` keeps.
template <class Pick>
std::vector<PinnedExpert> pinned_where(const ModelSpec& s, const FamilyAnalysis& a, int owner, Pick&& pick) {
  const ConsolidationPlan ranks = plan_consolidation(a.distances, 0, Policy::RoundRobin);
  std::vector<PinnedExpert> out;
  for (std::int64_t l = 0; l < s.num_layers; ++l)
    for (std::int64_t e = 0; e < s.num_experts; ++e) {
      const std::int64_t rank = ranks.rank[static_cast<std::size_t>(l * s.num_experts + e)];
      if (rank >= 0 && pick(rank)) out.push_back({l, e, owner});
    }
  return out;
}

// A layout strategy's resident experts: its capacity, or with a budget and none given, what the
// budget holds beside `sets_used` non-expert sets' worth of room (resident_sets auto: capacity.h's rule).
std::int64_t capacity_of(const StrategyConfig& config, const Family& family, int sets_used) {
  if (config.capacity > 0 || !config.budget_bytes) return config.capacity;
  return with_sets_asked(plan_capacity(family, *config.budget_bytes, config.reserve), config.resident_sets, sets_used).capacity;
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

Deployment::Deployment(const StrategyConfig& config, const Family& family, const HostStore& store,
                       const FamilyAnalysis& analysis, const std::filesystem::path& scratch)
    : config_(config) {
  const ModelSpec& s = store.spec();
  std::vector<std::string> names;
  for (const Variant& v : family.variants()) names.push_back(v.name);
  targets_ = names;
  const int n = static_cast<int>(names.size());
  // What every partition serves under; a strategy's layout is served within the strategy's budget.
  const ServingChoices choices{.budget = config.budget_bytes, .reserve = config.reserve, .hit = config.hit, .miss = config.miss,
                               .resident_sets = config.resident_sets, .device = config.device, .cpu_weights = config.cpu_weights};
  const RuntimeConfig base = served_config(choices);
  // Each partition starts warm: its first request pays only its own swap.
  auto add = [&](const HostStore& on, RuntimeConfig rc, std::vector<std::string> serves, int warm) {
    auto runtime = std::make_shared<Runtime>(on, std::move(rc));
    const int set = runtime->set_of(warm);
    runtime->make_resident(std::span<const int>(&set, 1));
    partitions_.push_back({std::move(runtime), std::move(serves)});
  };

  switch (config.kind) {
    case StrategyKind::Consolidated:
    case StrategyKind::NoReconfig: {
      const int sets_used = config.kind == StrategyKind::NoReconfig ? 1 : store.sets();
      const bool by_budget = config.capacity <= 0 && config.budget_bytes;
      const Layout layout = plan_layout(family, analysis, sets_used,
                                        {.budget = config.budget_bytes, .capacity = by_budget ? std::nullopt : std::optional(config.capacity),
                                         .policy = config.policy, .shares = config.shares, .reserve = config.reserve, .resident_sets = config.resident_sets})
                                .layout;
      RuntimeConfig rc = layout_config(layout, match_layout(layout, family, analysis.sha256, "strategy layout"), store, family, choices);
      if (config.kind == StrategyKind::NoReconfig) rc.non_expert_of.assign(static_cast<std::size_t>(n), 0);
      add(store, std::move(rc), names, 0);
      break;
    }
    case StrategyKind::Single:
    case StrategyKind::SingleResident: {
      const int single = config.single_target.empty() ? 0 : store.index(config.single_target);
      if (single < 0)
        throw InvalidArgument("strategy " + name(), "single_target '" + config.single_target + "'", "is not a variant");
      RuntimeConfig rc = base;
      // The paper's single model is offloaded under the same memory as the others: its best-ranked
      // `capacity` positions pinned, misses loaded. single-resident pins all: the upper reference.
      const std::int64_t capacity = config.kind == StrategyKind::Single ? capacity_of(config, family, 1) : 0;
      const bool offloaded = capacity > 0;
      rc.pinned = offloaded ? pinned_where(s, analysis, single, [&](std::int64_t rank) { return rank < capacity; }) : every_position(s, single);
      for (const std::string& name : names) rc.aliases.emplace_back(name, single);
      add(store, std::move(rc), names, single);
      break;
    }
    case StrategyKind::TimeSharing:
      add(store, time_sharing_config(base, s), names, 0);
      break;
    case StrategyKind::SpaceSharing: {
      // Partition i pins its own copies of the best-ranked capacity/N positions; budget, copy
      // bandwidth and compute are split N ways, as MIG slices a GPU: each step's measured compute and
      // copies are charged N times over (on the virtual clock as time, on the real one as sleep).
      const std::int64_t share = config.capacity / n;
      for (int i = 0; i < n; ++i) {
        RuntimeConfig rc = base;
        if (config.budget_bytes) rc.budget_bytes = *config.budget_bytes / static_cast<std::uint64_t>(n);
        rc.copy_slowdown = static_cast<double>(n);
        rc.compute_slowdown = static_cast<double>(n);  // MIG: a slice has 1/N of the compute too
        rc.pinned = pinned_where(s, analysis, i, [&](std::int64_t rank) { return rank < share; });
        add(store, std::move(rc), {names[static_cast<std::size_t>(i)]}, i);
      }
      break;
    }
    case StrategyKind::Averaging: {
      const auto dir = scratch / "averaged";
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      write_averaged(family, dir);
      merged_family_ = std::make_unique<Family>();
      merged_family_->add("averaged", dir);
      merged_store_ = std::make_unique<HostStore>(*merged_family_);
      RuntimeConfig rc = base;
      rc.pinned = every_position(s, 0);
      for (const std::string& name : names) rc.aliases.emplace_back(name, 0);
      add(*merged_store_, std::move(rc), names, 0);
      break;
    }
    case StrategyKind::Esft:
    case StrategyKind::Delta:
    case StrategyKind::Hybrid: {
      RuntimeConfig rc = over_base_config(config, store, base, rank_positions(analysis.distances), targets_);
      add(store, std::move(rc), targets_, store.index(targets_.front()));
      break;
    }
    case StrategyKind::VirtualExperts: {
      VirtualPlanOptions o{.reserve = config.reserve, .updates = config.updates};
      Layout layout;
      if (!config.calibration.empty()) {
        if (!config.budget_bytes)
          throw InvalidArgument("strategy virtual-experts", "calibration", "plans counts for a budget", "give the strategy a budget");
        o.budget_bytes = *config.budget_bytes;
        const std::string text = read_text_file(config.calibration, "give a text file in the serving domain");
        const auto ids = Tokenizer::load(family.variants().front().checkpoint->dir() / "tokenizer.json").encode(text, /*add_special=*/false);
        layout = plan_virtual(family, analysis.sha256, store, ids, o, &analysis.distances);
      } else {
        layout = uniform_virtual_layout(family, analysis.sha256, store, config.capacity, config.budget_bytes, o, &analysis.distances);
      }
      add(store, layout_config(layout, store.indices(family), store, family, choices), names, 0);
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
