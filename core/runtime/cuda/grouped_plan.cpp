#include "runtime/cuda/grouped_plan.h"

#include <map>
#include <utility>

namespace mosaic::cuda {

GroupedPlan grouped_plan(const RoutePlan& plan, std::int32_t large_from, const ServesOf& serves) {
  GroupedPlan out;
  out.pos_of.assign(plan.outcome.size(), -1);
  auto place = [&](const SlotGroup& g, bool delta) {
    const auto begin = static_cast<std::int32_t>(out.pair_at.size());
    for (std::int64_t p : g.pairs) {
      out.pos_of[static_cast<std::size_t>(p)] = static_cast<std::int32_t>(out.pair_at.size());
      out.pair_at.push_back(static_cast<std::int32_t>(p));
    }
    return PlannedGroup{g.slot, begin, static_cast<std::int32_t>(out.pair_at.size()), delta};
  };
  std::vector<std::pair<SlotRef, std::int32_t>> loaded;  // the step's loads so far, latest last
  auto last_load = [&](SlotRef s) {
    for (auto it = loaded.rbegin(); it != loaded.rend(); ++it)
      if (it->first == s) return it->second;
    return std::int32_t{-1};
  };

  for (const RouteWave& wave : plan.waves) {
    PlannedWave w;
    w.loads = wave.loads;
    for (const ExpertLoad& l : wave.loads) loaded.emplace_back(l.slot, l.content);
    std::vector<SlotServes> what(wave.groups.size());
    std::map<std::array<std::int32_t, 3>, std::vector<std::size_t>> sharing;  // dense matrices → groups
    if (serves)
      for (std::size_t i = 0; i < wave.groups.size(); ++i) {
        what[i] = serves(wave.groups[i].slot, last_load(wave.groups[i].slot));
        sharing[what[i].dense].push_back(i);
      }
    // A bundle for each set of dense matrices some delta goes over, in its first group's order.
    std::vector<std::vector<std::size_t>> bundles;
    std::vector<char> bundled(wave.groups.size(), 0);
    for (std::size_t i = 0; i < wave.groups.size(); ++i) {
      if (!what[i].delta || bundled[i]) continue;
      bundles.push_back(sharing[what[i].dense]);
      for (std::size_t j : bundles.back()) bundled[j] = 1;
    }
    for (std::size_t i = 0; i < wave.groups.size(); ++i) {
      if (bundled[i]) continue;
      const PlannedGroup g = place(wave.groups[i], false);
      (g.end - g.begin >= large_from ? w.large : w.small).push_back(g);
    }
    for (const auto& members : bundles) {
      PlannedBundle b{static_cast<std::int32_t>(out.pair_at.size()), 0, {}};
      for (std::size_t j : members) b.groups.push_back(place(wave.groups[j], what[j].delta));
      b.end = static_cast<std::int32_t>(out.pair_at.size());
      w.bundles.push_back(std::move(b));
    }
    out.waves.push_back(std::move(w));
  }
  return out;
}

}  // namespace mosaic::cuda
