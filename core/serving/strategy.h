#pragma once
// The paper's serving strategies as configurations of the one runtime (ARCHITECTURE.md, "Strategies
// are configurations, not engines"). A StrategyServer owns the runtimes a strategy needs — one,
// or one per partition for space-sharing — and serves a request to completion on the calling
// thread. Each partition ("lane") is an independent FIFO queue for the runner.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/family_analysis.h"
#include "runtime/runtime.h"
#include "serving/workload.h"

namespace mosaic {

enum class StrategyKind {
  Consolidated,  // similarity layout + per-request non-expert swap (the paper's system)
  NoReconfig,    // the same layout, never swapping: variant 0's non-expert weights serve all
  Single,        // one variant alone, fully resident, at the summed rate: the upper reference
  TimeSharing,   // one whole model resident; a request for another variant swaps in all of it
  SpaceSharing,  // budget, capacity and copy bandwidth split evenly; each partition serves its variant
  Averaging,     // one merged model (the uniform mean) serves every request
};

std::string_view strategy_name(StrategyKind k);  // "consolidated", "no-reconfig", …
std::optional<StrategyKind> parse_strategy(std::string_view name);

struct StrategyConfig {
  StrategyKind kind = StrategyKind::Consolidated;
  std::int64_t capacity = 0;                  // resident experts in total (layout strategies, space-sharing)
  std::optional<std::uint64_t> budget_bytes;  // enforced on the device when given (split for space-sharing)
  HitPolicy hit = HitPolicy::Consolidated;
  MissPolicy miss = MissPolicy::Transient;
  std::string single_target;                  // Single: the variant serving everything (default: the first)
};

// What serving one request measured, from the moment it started.
struct ServedRequest {
  std::vector<std::int64_t> tokens;
  Finish finish = Finish::Length;
  std::string error;
  double first_token_seconds = 0;  // start → first token (includes the swap)
  double service_seconds = 0;      // start → finished
  RuntimeCounters counters;
};

class StrategyServer {
 public:
  // `store` holds `family` (shared by every strategy of a sweep); `scratch` is a writable folder
  // for the averaging merge. Throws BudgetError / InvalidArgument when the strategy cannot be built.
  StrategyServer(const StrategyConfig& config, const Family& family, const HostStore& store,
                 const FamilyAnalysis& analysis, const std::filesystem::path& scratch);
  ~StrategyServer();

  const StrategyConfig& config() const { return config_; }
  std::string name() const { return std::string(strategy_name(config_.kind)); }
  std::size_t lanes() const { return lanes_.size(); }
  std::size_t lane_of(const std::string& target) const;  // throws InvalidArgument for an unknown target
  const Runtime& runtime(std::size_t lane) const;        // for inspection: budgets, slots, tables
  // Serves `request` to completion. Safe to call concurrently for different lanes.
  ServedRequest serve(const WorkloadRequest& request, const TokenCallback& on_token = {});

 private:
  struct Lane;
  StrategyConfig config_;
  std::vector<std::unique_ptr<Lane>> lanes_;
};

}  // namespace mosaic
