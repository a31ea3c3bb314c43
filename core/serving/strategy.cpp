#include "serving/strategy.h"

#include <chrono>

#include "analysis/merge.h"
#include "common/error.h"

namespace mosaic {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::pair<StrategyKind, std::string_view> kNames[] = {
    {StrategyKind::Consolidated, "consolidated"}, {StrategyKind::NoReconfig, "no-reconfig"},
    {StrategyKind::Single, "single"},             {StrategyKind::TimeSharing, "time-sharing"},
    {StrategyKind::SpaceSharing, "space-sharing"}, {StrategyKind::Averaging, "averaging"}};

// A layout over `family` with `owner` resident at the positions `pick` selects (-1 elsewhere).
template <class Pick>
Layout layout_where(const Family& family, const FamilyAnalysis& a, Pick&& pick) {
  ConsolidationPlan plan = plan_consolidation(a.distances, 0, Policy::RoundRobin);  // ranks and distances
  std::int64_t residents = 0;
  for (std::size_t p = 0; p < plan.map.size(); ++p) {
    if (plan.rank[p] < 0) continue;  // dense layer
    plan.map[p] = pick(static_cast<std::int64_t>(p), plan.rank[p]);
    residents += plan.map[p] >= 0;
  }
  plan.capacity = residents;
  return make_layout(family, a.sha256, std::move(plan));
}

}  // namespace

std::string_view strategy_name(StrategyKind k) {
  for (const auto& [kind, name] : kNames)
    if (kind == k) return name;
  return "?";
}

std::optional<StrategyKind> parse_strategy(std::string_view name) {
  for (const auto& [kind, n] : kNames)
    if (n == name) return kind;
  return std::nullopt;
}

struct StrategyServer::Lane {
  std::unique_ptr<Family> own_family;  // averaging: the merged model
  std::unique_ptr<HostStore> own_store;
  const HostStore* store = nullptr;
  std::unique_ptr<Runtime> runtime;
  std::vector<std::string> serves;  // targets routed to this lane
  int fixed_target = -1;            // >= 0: every request runs this store variant
};

StrategyServer::StrategyServer(const StrategyConfig& config, const Family& family, const HostStore& store,
                               const FamilyAnalysis& analysis, const std::filesystem::path& scratch)
    : config_(config) {
  std::vector<std::string> names;
  for (const Variant& v : family.variants()) names.push_back(v.name);
  const auto n = static_cast<std::int64_t>(names.size());
  RuntimeOptions options{.hit = config.hit, .miss = config.miss, .budget_bytes = config.budget_bytes};
  auto add_lane = [&](const HostStore& s, const Family& f, const std::vector<std::string>& hashes, const Layout& layout,
                      RuntimeOptions o, std::vector<std::string> serves, int fixed, int warm) {
    auto lane = std::make_unique<Lane>();
    lane->store = &s;
    lane->runtime = std::make_unique<Runtime>(s, layout, match_layout(layout, f, hashes, "strategy layout"), o);
    RuntimeCounters ignored = lane->runtime->new_counters();
    lane->runtime->reconfigure(warm, ignored);  // start warm: a first request pays only its own swap
    lane->serves = std::move(serves);
    lane->fixed_target = fixed;
    lanes_.push_back(std::move(lane));
  };

  switch (config.kind) {
    case StrategyKind::Consolidated:
    case StrategyKind::NoReconfig: {
      const Layout layout = make_layout(family, analysis.sha256,
                                        plan_consolidation(analysis.distances, config.capacity, Policy::RoundRobin));
      options.swap_non_expert = config.kind == StrategyKind::Consolidated;
      add_lane(store, family, analysis.sha256, layout, options, names, -1, 0);
      break;
    }
    case StrategyKind::Single: {
      const int single = config.single_target.empty() ? 0 : store.index(config.single_target);
      if (single < 0)
        throw InvalidArgument("strategy single", "single_target '" + config.single_target + "'", "is not a variant");
      add_lane(store, family, analysis.sha256,
               layout_where(family, analysis, [&](std::int64_t, std::int64_t) { return single; }), options, names, single,
               single);
      break;
    }
    case StrategyKind::TimeSharing: {
      options.hit = HitPolicy::Strict;
      options.follow_target = true;
      add_lane(store, family, analysis.sha256,
               layout_where(family, analysis, [](std::int64_t, std::int64_t) { return 0; }), options, names, -1, 0);
      break;
    }
    case StrategyKind::SpaceSharing: {
      // Partition i pins its own copies of the best-ranked capacity/N positions; budget and copy
      // bandwidth are split N ways.
      const std::int64_t share = config.capacity / n;
      if (config.budget_bytes) options.budget_bytes = *config.budget_bytes / static_cast<std::uint64_t>(n);
      options.copy_slowdown = static_cast<double>(n);
      for (int i = 0; i < n; ++i)
        add_lane(store, family, analysis.sha256,
                 layout_where(family, analysis, [&](std::int64_t, std::int64_t rank) { return rank < share ? i : -1; }),
                 options, {names[static_cast<std::size_t>(i)]}, -1, i);
      break;
    }
    case StrategyKind::Averaging: {
      const auto dir = scratch / "averaged";
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      write_averaged(family, dir);
      auto merged = std::make_unique<Family>();
      merged->add("averaged", dir);
      auto merged_store = std::make_unique<HostStore>(*merged);
      const auto hashes = family_sha256(*merged, std::nullopt);
      Layout layout;
      layout.variants = {{"averaged", dir.string(), hashes[0]}};
      layout.plan.layers = store.spec().num_layers;
      layout.plan.experts = store.spec().num_experts;
      layout.plan.variants = 1;
      layout.plan.map.assign(static_cast<std::size_t>(layout.plan.layers * layout.plan.experts), -1);
      for (std::int64_t l = 0; l < layout.plan.layers; ++l)
        for (std::int64_t e = 0; e < layout.plan.experts && store.spec().is_sparse(l); ++e)
          layout.plan.map[static_cast<std::size_t>(l * layout.plan.experts + e)] = 0;
      layout.plan.capacity = moe_positions(store.spec());
      add_lane(*merged_store, *merged, hashes, layout, options, names, 0, 0);
      lanes_.back()->own_family = std::move(merged);
      lanes_.back()->own_store = std::move(merged_store);
      break;
    }
  }
}

StrategyServer::~StrategyServer() = default;

std::size_t StrategyServer::lane_of(const std::string& target) const {
  for (std::size_t i = 0; i < lanes_.size(); ++i)
    for (const auto& t : lanes_[i]->serves)
      if (t == target) return i;
  throw InvalidArgument("strategy " + name(), "target '" + target + "'", "is not a variant being served");
}

const Runtime& StrategyServer::runtime(std::size_t lane) const { return *lanes_.at(lane)->runtime; }

ServedRequest StrategyServer::serve(const WorkloadRequest& request, const TokenCallback& on_token) {
  Lane& lane = *lanes_[lane_of(request.target)];
  const int target = lane.fixed_target >= 0 ? lane.fixed_target : lane.store->index(request.target);
  ServedRequest out;
  out.counters = lane.runtime->new_counters();
  const auto start = Clock::now();
  try {
    const GenerationRequest g{.prompt = request.prompt, .max_new_tokens = request.max_new_tokens};
    const GenerationResult r = lane.runtime->generate(target, g, out.counters, [&](std::int64_t token, std::int64_t index) {
      if (index == 0) out.first_token_seconds = std::chrono::duration<double>(Clock::now() - start).count();
      return !on_token || on_token(token, index);
    });
    out.tokens = r.tokens;
    out.finish = r.finish;
  } catch (const std::exception& e) {
    out.finish = Finish::Failed;
    out.error = e.what();
  }
  out.service_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return out;
}

}  // namespace mosaic
