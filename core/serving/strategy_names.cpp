// The strategies' names and labels as sweep configs, the CLI and reports spell them; apart from strategy.cpp
// so that parsers (sweep configs) link without the engine.
#include <utility>

#include "serving/strategy.h"

namespace mosaic {
namespace {

constexpr std::pair<StrategyKind, std::string_view> kNames[] = {
    {StrategyKind::Consolidated, "consolidated"}, {StrategyKind::NoReconfig, "no-reconfig"},
    {StrategyKind::Single, "single"},             {StrategyKind::SingleResident, "single-resident"},
    {StrategyKind::TimeSharing, "time-sharing"},
    {StrategyKind::SpaceSharing, "space-sharing"}, {StrategyKind::Averaging, "averaging"},
    {StrategyKind::Esft, "esft"},                 {StrategyKind::Delta, "delta"},
    {StrategyKind::Hybrid, "hybrid"},             {StrategyKind::VirtualExperts, "virtual-experts"}};

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

const std::vector<std::string_view>& strategy_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> v;
    for (const auto& [kind, name] : kNames) v.push_back(name);
    return v;
  }();
  return names;
}

std::string strategy_label(const StrategyConfig& config) {
  if (!config.name.empty()) return config.name;
  return std::string(strategy_name(config.kind)) + (config.miss.starts_with("prefetch") ? "+" + config.miss : "") +
         (config.scheduler.swap_ahead.value_or(false) ? "+ahead" : "");
}

}  // namespace mosaic
