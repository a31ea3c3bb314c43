#include "runtime/route_plan.h"

#include <algorithm>
#include <map>

namespace mosaic {
namespace {

// A slot a policy keeps now holds `content`: rows whose own expert at this position it is (and that
// no other slot serves) are pointed at it; rows pointed at what it held before lose it.
void keep(const LayerSlots& s, std::int32_t slot, const ExpertSource& source, ExpertId content, bool ahead = false) {
  const auto e_old = s.pool.source(slot).expert;
  const int rows = s.table.targets();
  if (s.pool.content(slot) >= 0)
    for (int r = 0; r < rows; ++r)
      if (s.table.at(r, e_old) == slot) s.table.set(r, e_old, RerouteTable::kMiss);
  s.pool.fill(slot, source, content, ahead);
  for (int r = 0; r < rows; ++r)
    if (s.table.at(r, source.expert) == RerouteTable::kMiss && s.store.expert(r, s.layer, source.expert) == content)
      s.table.set(r, source.expert, slot);
}

}  // namespace

RoutePlan plan_routes(const LayerSlots& s, std::span<const std::int64_t> experts, std::int64_t k, std::span<const int> rows) {
  const auto pairs = static_cast<std::int64_t>(experts.size());
  RoutePlan plan;
  plan.outcome.assign(static_cast<std::size_t>(pairs), PairOutcome::Hit);
  std::vector<SlotRef> slot_of(static_cast<std::size_t>(pairs));
  std::vector<int> wave_of(static_cast<std::size_t>(pairs), 0);

  // Hits first, touching their slots, so that no slot this step reads is evicted for a miss.
  const std::uint64_t since = s.pool.now();
  std::vector<ExpertLoad> misses;  // distinct contents, in order of first need
  std::map<ExpertId, std::size_t> miss_index;
  std::vector<std::size_t> miss_of(static_cast<std::size_t>(pairs), 0);
  for (std::int64_t p = 0; p < pairs; ++p) {
    const int row = rows[static_cast<std::size_t>(p / k)];
    const std::int64_t e = experts[static_cast<std::size_t>(p)];
    const std::int32_t slot = s.table.at(row, e);
    auto& outcome = plan.outcome[static_cast<std::size_t>(p)];
    if (slot != RerouteTable::kMiss) {
      slot_of[static_cast<std::size_t>(p)] = {false, slot};
      s.pool.touch(slot);
      if (s.pool.ahead(slot)) {
        plan.ahead_used.push_back(p);
        s.pool.settle(slot);
      }
    } else if (s.policy.masks_router()) {
      outcome = PairOutcome::Dropped;
    } else {
      outcome = PairOutcome::Miss;
      const ExpertId content = s.store.expert(row, s.layer, e);
      if (s.recent) s.recent->missed(row, content);
      const auto [it, fresh] = miss_index.emplace(content, misses.size());
      if (fresh) misses.push_back({{}, content, s.store.source(row, s.layer, e), p});
      miss_of[static_cast<std::size_t>(p)] = it->second;
    }
  }

  const std::vector<Placement> placed = s.policy.place(misses.size(), s.pool, s.scratch, since);
  int waves = 1;
  for (const Placement& at : placed) waves = std::max(waves, at.wave + 1);
  plan.waves.resize(static_cast<std::size_t>(waves));
  for (std::size_t i = 0; i < misses.size(); ++i) {
    ExpertLoad& load = misses[i];
    load.slot = placed[i].slot;
    if (load.slot.scratch) s.scratch.fill(load.slot.slot, load.source, load.content);
    else keep(s, load.slot.slot, load.source, load.content);
    plan.waves[static_cast<std::size_t>(placed[i].wave)].loads.push_back(load);
  }
  for (std::int64_t p = 0; p < pairs; ++p)
    if (plan.outcome[static_cast<std::size_t>(p)] == PairOutcome::Miss) {
      const std::size_t i = miss_of[static_cast<std::size_t>(p)];
      slot_of[static_cast<std::size_t>(p)] = misses[i].slot;
      wave_of[static_cast<std::size_t>(p)] = placed[i].wave;
    }

  // Group by slot within each wave: layer slots in slot order, then scratch slots.
  std::vector<std::map<std::pair<bool, std::int32_t>, std::vector<std::int64_t>>> groups(static_cast<std::size_t>(waves));
  for (std::int64_t p = 0; p < pairs; ++p) {
    if (plan.outcome[static_cast<std::size_t>(p)] == PairOutcome::Dropped) continue;
    const SlotRef ref = slot_of[static_cast<std::size_t>(p)];
    groups[static_cast<std::size_t>(wave_of[static_cast<std::size_t>(p)])][{ref.scratch, ref.slot}].push_back(p);
  }
  for (std::size_t w = 0; w < groups.size(); ++w)
    for (auto& [key, list] : groups[w]) plan.waves[w].groups.push_back({{key.first, key.second}, std::move(list)});
  return plan;
}

std::vector<ExpertLoad> plan_prefetch(const LayerSlots& s, std::span<const std::int64_t> predicted, std::int64_t k,
                                      std::span<const int> rows) {
  // Slots the predictions hit are touched first, so that no prefetch evicts one.
  const std::uint64_t since = s.pool.now();
  std::vector<ExpertLoad> wanted;
  for (std::size_t p = 0; p < predicted.size(); ++p) {
    const int row = rows[p / static_cast<std::size_t>(k)];
    const std::int64_t e = predicted[p];
    if (const std::int32_t slot = s.table.at(row, e); slot != RerouteTable::kMiss) {
      s.pool.touch(slot);
      continue;
    }
    const ExpertId content = s.store.expert(row, s.layer, e);
    if (std::none_of(wanted.begin(), wanted.end(), [&](const ExpertLoad& w) { return w.content == content; }))
      wanted.push_back({{}, content, s.store.source(row, s.layer, e), static_cast<std::int64_t>(p)});
  }
  const std::vector<Placement> placed = s.policy.place(wanted.size(), s.pool, s.scratch, since);
  std::vector<ExpertLoad> loads;
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    if (placed[i].slot.scratch) continue;
    ExpertLoad& load = loads.emplace_back(wanted[i]);
    load.slot = placed[i].slot;
    keep(s, load.slot.slot, load.source, load.content, /*ahead=*/true);
  }
  return loads;
}

void count_outcomes(const RoutePlan& plan, std::int64_t k, std::span<const int> sequence, std::int64_t layer,
                    std::vector<std::vector<LayerCounts>>& counts) {
  for (std::size_t p = 0; p < plan.outcome.size(); ++p) {
    LayerCounts& c = counts[static_cast<std::size_t>(sequence[p / static_cast<std::size_t>(k)])][static_cast<std::size_t>(layer)];
    if (plan.outcome[p] == PairOutcome::Hit) ++c.hits;
    if (plan.outcome[p] == PairOutcome::Miss) ++c.misses;
  }
  for (std::int64_t p : plan.ahead_used)
    ++counts[static_cast<std::size_t>(sequence[static_cast<std::size_t>(p / k)])][static_cast<std::size_t>(layer)].prefetch_used;
}

void trace_routes(const RoutePlan& plan, const LayerSlots& slots, std::span<const std::int64_t> experts, std::int64_t k,
                  std::span<const int> sequence, std::span<const std::int64_t> first, std::span<const char> traced,
                  std::vector<std::vector<RoutedExpert>>& routes) {
  // Each pair's source: what its slot held in its wave. A slot loaded in the plan holds what was
  // last loaded into it by then; any other holds what its pool holds now (plan_routes left it so).
  std::vector<const ExpertSource*> source(plan.outcome.size(), nullptr);
  std::vector<std::pair<SlotRef, const ExpertSource*>> loaded;
  for (const RouteWave& wave : plan.waves) {
    for (const ExpertLoad& load : wave.loads) {
      auto it = std::find_if(loaded.begin(), loaded.end(), [&](const auto& l) { return l.first == load.slot; });
      if (it == loaded.end()) loaded.emplace_back(load.slot, &load.source);
      else it->second = &load.source;
    }
    for (const SlotGroup& group : wave.groups) {
      const auto it = std::find_if(loaded.begin(), loaded.end(), [&](const auto& l) { return l.first == group.slot; });
      const ExpertSource* s = it != loaded.end() ? it->second
                                                 : &(group.slot.scratch ? slots.scratch : slots.pool).source(group.slot.slot);
      for (std::int64_t p : group.pairs) source[static_cast<std::size_t>(p)] = s;
    }
  }
  for (std::size_t p = 0; p < plan.outcome.size(); ++p) {
    const std::size_t t = p / static_cast<std::size_t>(k);
    const auto seq = static_cast<std::size_t>(sequence[t]);
    if (!traced[seq]) continue;
    RoutedExpert r;
    r.token = static_cast<std::int32_t>(static_cast<std::int64_t>(t) - first[seq]);
    r.layer = static_cast<std::int16_t>(slots.layer);
    r.expert = static_cast<std::int16_t>(experts[p]);
    r.outcome = plan.outcome[p] == PairOutcome::Hit    ? RoutedExpert::Outcome::Hit
                : plan.outcome[p] == PairOutcome::Miss ? RoutedExpert::Outcome::Miss
                                                       : RoutedExpert::Outcome::Dropped;
    if (const ExpertSource* s = source[p]; s != nullptr && !s->empty()) {
      r.served_by = static_cast<std::int16_t>(s->target);
      r.served_expert = static_cast<std::int16_t>(s->expert);
      r.served_by_adapter = s->kind == ExpertSource::Kind::Adapter;
    }
    routes[seq].push_back(r);
  }
}

}  // namespace mosaic
