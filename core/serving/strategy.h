#pragma once
// The serving strategies as configurations of the one engine (ARCHITECTURE.md, "Strategies are
// configurations, not engines"). A Deployment is a strategy built on a family: one partition — a
// runtime (layout, miss policy, resident sets, budget) and the names it serves — or, for
// space-sharing, one per variant, each with its share of the budget and copy bandwidth. Every
// partition is served by an Engine with the strategy's scheduler options.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/consolidation.h"
#include "analysis/family_analysis.h"
#include "runtime/runtime.h"
#include "runtime/scheduler.h"

namespace mosaic {

enum class StrategyKind {
  Consolidated,  // similarity layout + per-request non-expert swap (Multi-MoE)
  NoReconfig,    // the same layout, never swapping: variant 0's non-expert weights serve all
  Single,        // one variant serving every request, offloaded as the paper's is: `capacity` of its experts
                 // pinned (every one when 0), the rest loaded on a miss
  SingleResident,  // one variant serving every request with every expert resident: the upper reference
  TimeSharing,   // one whole model resident; a step for another variant swaps in all of it
  SpaceSharing,  // budget, capacity and copy bandwidth split evenly; each partition serves its variant
  Averaging,     // one merged model (the uniform mean) serves every request
  Esft,          // ESFT adapters over their base (ExpertWeave): base and tuned experts pinned, one batch
  Delta,         // delta folders over their base (DeltaMoE's codec across fine-tunes): base pinned, packed deltas pinned while the budget holds them
  Hybrid,        // delta folders: the least similar positions get their deltas, the most similar share the base's copy
  VirtualExperts,  // SwapMoE: per-layer counts planned on calibration text (or uniform), the sets updated with the traffic
};

std::string_view strategy_name(StrategyKind k);  // "consolidated", "no-reconfig", …, "delta", "hybrid", "virtual-experts"
std::optional<StrategyKind> parse_strategy(std::string_view name);
const std::vector<std::string_view>& strategy_names();

struct StrategyConfig {
  StrategyKind kind = StrategyKind::Consolidated;
  std::int64_t capacity = 0;                  // resident experts in total (layout strategies, space-sharing);
                                              // hybrid: positions that share the base's copy (at least)
  Policy policy = Policy::RoundRobin;         // which variant's copy stays at each resident position
  std::vector<double> shares;                 // Weighted: traffic shares per variant (empty: equal)
  std::optional<std::uint64_t> budget_bytes;  // enforced on the device when given (split for space-sharing)
  HitPolicy hit = HitPolicy::Consolidated;
  std::string miss = "transient";
  std::string single_target;                  // Single: the variant serving everything (default: the first)
  int resident_sets = 1;                      // K non-expert sets resident at once, budget permitting
  ReserveSpec reserve;                        // KV context × requests, prefill chunk, miss slots
  // virtual-experts: text the planner measures its counts on (with a budget; empty: uniform counts,
  // from the capacity or the budget), and how the runtime updates the sets.
  std::filesystem::path calibration;
  VirtualConfig updates;
  SchedulerOptions scheduler;
  Device device = Device::Cpu;                // every partition's backend
  CpuWeights cpu_weights = CpuWeights::Stored;  // on the CPU backend: bf16 held as stored, or fp32 copies
  std::string name;                           // what its runs are recorded as; empty: strategy_label's default
};

// What a strategy's runs are recorded as: `name` when given, else its kind's name, with "+prefetch"
// for the prefetch miss policy and "+ahead" for look-ahead swaps (SchedulerOptions::swap_ahead), so
// that one sweep can compare a strategy with and without them. A sweep names strategies that would
// still share a label by the settings that tell them apart (sweep.h).
std::string strategy_label(const StrategyConfig& config);

// Time-sharing's runtime from `base`: one whole model resident (every position of target 0 pinned),
// swapped whole, experts with it, when a step needs another; a slot serves its own expert only.
RuntimeConfig time_sharing_config(RuntimeConfig base, const ModelSpec& spec);

// esft, delta and hybrid's runtime from `base` over `store` (see StrategyKind), and into `targets`
// the names it serves: the adapters, or the delta folders, whose base the store holds.
// `similar_first`: the MoE positions from the most similar down, hybrid's order (its deltas go to
// the least similar first). Throws InvalidArgument when the store holds none of them, or (hybrid)
// delta folders over two bases.
RuntimeConfig over_base_config(const StrategyConfig& config, const HostStore& store, RuntimeConfig base,
                               const std::vector<std::int64_t>& similar_first, std::vector<std::string>& targets);

class Deployment {
 public:
  struct Partition {
    std::shared_ptr<Runtime> runtime;
    std::vector<std::string> serves;  // request names routed to this partition
  };

  // `store` holds `family`; `scratch` is a writable folder for the averaging merge. Throws
  // BudgetError / InvalidArgument when the strategy cannot be built on this family.
  Deployment(const StrategyConfig& config, const Family& family, const HostStore& store, const FamilyAnalysis& analysis,
             const std::filesystem::path& scratch);
  // The strategy on a simulated device (runtime/sim_backend.h) over a family known by its configs
  // alone (`store`: HostStore::of_configs, which outlives the deployment). With no expert distances
  // to rank positions by, a strategy's resident positions are taken in an even spread over the MoE
  // layers (config_layout.h); under uniform routing only a layer's count matters (hybrid's deltas
  // take the spread from its end). Averaging serves the first variant's shapes as the merged model;
  // virtual-experts has uniform counts. Throws UnsupportedError for virtual-experts with a
  // calibration text, BudgetError naming how many experts a partition's budget holds, and what
  // over_base_config and the runtime throw.
  Deployment(const StrategyConfig& config, const HostStore& store, std::shared_ptr<const SimulatedDevice> device);
  ~Deployment();

  const StrategyConfig& config() const { return config_; }
  std::string name() const { return strategy_label(config_); }
  const std::vector<Partition>& partitions() const { return partitions_; }
  std::size_t partition_of(const std::string& target) const;  // throws InvalidArgument for a name not served
  // The names a workload for this strategy draws from: every variant, or (esft, delta) the adapters
  // or delta folders.
  const std::vector<std::string>& targets() const { return targets_; }

 private:
  struct Basis;  // strategy.cpp: what the one assembly below builds on
  void assemble(const Basis& basis);

  StrategyConfig config_;
  std::vector<Partition> partitions_;
  std::vector<std::string> targets_;
  std::unique_ptr<Family> merged_family_;  // averaging
  std::unique_ptr<HostStore> merged_store_;
};

}  // namespace mosaic
