#pragma once
// SwapMoE's memory planner (§3.4): how many experts each layer keeps resident under a device budget,
// chosen to lose the least output quality on calibration text, written as a layout (policy
// "virtual") that the runtime serves with virtual experts.
//
// The paper searches joint configurations with a genetic algorithm over a learned accuracy model.
// Here the loss is measured, not modelled: for every layer l and count c (top-k … E), the calibration
// text's mean NLL with only layer l masked to its c most important experts (importance as the runtime
// measures it, eq. 1, over the same text), minus the unmasked NLL. Taking a configuration's loss as
// the sum of its layers' rises makes the problem a knapsack over slots that a dynamic program solves
// exactly in O(layers × slots × experts) — milliseconds where a genetic search would need many
// forward passes per generation and still not be sure of the optimum. The sum is checked, not
// assumed: the planned and the uniform counts are each measured with every layer masked at once.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/capacity.h"
#include "analysis/expert_distance.h"
#include "analysis/layout.h"
#include "model/family.h"
#include "runtime/host_store.h"
#include "runtime/runtime.h"

namespace mosaic {

struct VirtualPlanOptions {
  std::uint64_t budget_bytes = 0;
  ReserveSpec reserve;     // miss slots are not reserved: masked gating never loads
  VirtualConfig updates;   // staging slots (charged), update interval, decay, shift: written to the layout
  std::int64_t window = 128;       // calibration tokens per sequence
  std::int64_t max_windows = 16;   // at most this many sequences, spread over the text
};

// The exact dynamic program on its own: per layer, the slots and the loss of each choice; at most
// `slots` in all. Returns the choice per layer (an index into that layer's options) minimising the
// summed loss; ties go to more slots. Throws BudgetError when even the cheapest choices do not fit.
std::vector<std::size_t> plan_counts(const std::vector<std::vector<std::int64_t>>& slots, const std::vector<std::vector<double>>& loss,
                                     std::int64_t available);

// What the planner measures once for a family and a calibration text; any budget's plan follows
// from it without another forward pass (but the check of the chosen counts).
struct VirtualCurves {
  std::vector<std::int64_t> sparse;                           // the MoE layers
  std::vector<std::vector<std::vector<std::int64_t>>> order;  // [variant][layer]: experts, most important first
  std::vector<double> importance;                             // [layers * experts]: summed over the variants
  std::vector<std::vector<double>> rise;                      // [sparse layer][count − top_k]: mean NLL rise, that layer alone
  std::vector<std::vector<std::int64_t>> slots;               // [sparse layer][count − top_k]: distinct experts it keeps
  double full_nll = 0;                                        // every expert resident
  std::vector<std::int64_t> calibration;
  std::int64_t window = 0, max_windows = 0;
};

// Throws InvalidArgument (delta folders, which virtual experts do not swap; calibration shorter
// than one window).
VirtualCurves measure_virtual(const Family& family, const HostStore& store, std::span<const std::int64_t> calibration, std::int64_t window,
                              std::int64_t max_windows);

// The plan for `options.budget_bytes` from measured curves: the dynamic program's counts, or with
// `uniform` the most experts per layer the same bytes hold uniformly (each layer's most important).
// Throws BudgetError naming the least budget that holds top-k experts per layer of every variant.
// `distances` (optional) fills the layout's distance grid, as consolidation's layouts show it.
Layout plan_virtual(const Family& family, const std::vector<std::string>& sha256, const HostStore& store, const VirtualCurves& curves,
                    const VirtualPlanOptions& options, const ExpertDistances* distances = nullptr, bool uniform = false);

// Both steps at once. `sha256[i]`: family variant i's content hash; `store` holds `family`.
Layout plan_virtual(const Family& family, const std::vector<std::string>& sha256, const HostStore& store,
                    std::span<const std::int64_t> calibration, const VirtualPlanOptions& options,
                    const ExpertDistances* distances = nullptr);

// Uniform counts' experts per MoE layer and variant from `capacity`, resident experts in all over
// `variants` variants: spread evenly, at least the router's top-k, at most the layer's experts.
std::int64_t uniform_virtual_count(const ModelSpec& spec, std::int64_t capacity, std::int64_t variants);

// Virtual experts without calibration: `count` experts per layer for every variant (its first ones;
// the runtime's updates move the sets to where the traffic is), `count` from `capacity` (resident
// experts in all, spread evenly) when > 0, else the most that `budget` holds. Throws BudgetError and
// InvalidArgument as plan_virtual does.
Layout uniform_virtual_layout(const Family& family, const std::vector<std::string>& sha256, const HostStore& store, std::int64_t capacity,
                              std::optional<std::uint64_t> budget, const VirtualPlanOptions& options,
                              const ExpertDistances* distances = nullptr);

// Sets `config` to serve a virtual layout: its initial set pinned (each distinct expert once), strict
// hits, the router masked to the set (no miss slots), updates as the layout says; budget, reserve and
// device are left as they are. `to_store[i]`: layout variant i's target.
void apply_virtual_layout(RuntimeConfig& config, const Layout& layout, const std::vector<int>& to_store, const HostStore& store);

}  // namespace mosaic
