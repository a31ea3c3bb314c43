#pragma once
// What a layout serves, the same wherever it is opened (the workbench's Session, `mosaic-cli …
// --layout` and the layouts the CLI plans, the sweep's strategies, bench-quality, plan-virtual):
// within the budget it was planned under and the reserve it records, unless the caller asks for
// others; the experts it pins — a hybrid layout's deltas with them; a virtual layout's initial set,
// behind masked gating that updates.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/layout.h"
#include "runtime/runtime.h"

namespace mosaic {

// The budget a layout file was planned under: the file's own; for a hybrid layout without one, its
// floor and the deltas it pins (at `reserve`); else none (planned by capacity). The workbench and
// `mosaic-cli … --layout` serve a layout within it, with the reserve it records (Layout::reserve_spec),
// unless asked for another budget. `to_store` maps layout variants to the store's targets.
std::optional<std::uint64_t> layout_budget(const Layout& layout, const HostStore& store, const Family& family,
                                           const std::vector<int>& to_store, const ReserveSpec& reserve);

// What a caller chooses beside the layout: the policies, the device, and a budget and reserve of its
// own. The defaults are RuntimeConfig's.
struct ServingChoices {
  std::optional<std::uint64_t> budget;  // another budget than the layout's (--budget); with it, `reserve` is used
  ReserveSpec reserve;                  // where the layout records none, or with `budget`
  bool own_miss_slots = false;          // `reserve`'s miss slots over the layout's (--miss-slots given)
  HitPolicy hit = HitPolicy::Consolidated;
  std::string miss = "transient";
  int resident_sets = 1;
  Device device = Device::Cpu;
  CpuWeights cpu_weights = CpuWeights::Stored;
};

// The configuration every layout a caller serves starts from: its choices, nothing pinned.
RuntimeConfig served_config(const ServingChoices& choices);

// The budget and reserve `layout` is served under: `choices.budget` with `choices.reserve`; else the
// reserve the layout records (Layout::reserve_spec; the caller's for a file from before it was
// recorded, and the caller's miss slots where `own_miss_slots`) and the budget it was planned under
// at that reserve (layout_budget; none for a layout planned by capacity: no limit).
struct LayoutTerms {
  std::optional<std::uint64_t> budget;
  ReserveSpec reserve;
};
LayoutTerms layout_terms(const Layout& layout, const std::vector<int>& to_store, const HostStore& store, const Family& family,
                         const ServingChoices& choices);

// What serving `layout` means: served_config(choices) under layout_terms, with pin_layout's pins.
RuntimeConfig layout_config(const Layout& layout, const std::vector<int>& to_store, const HostStore& store, const Family& family,
                            const ServingChoices& choices);

// `config`'s pins and virtual experts, as the layout says: last, since a virtual layout also sets the
// hit and miss policies and the reserve's miss slots; the rest is left as it is (a hybrid layout's
// rows without their delta resident take the base's copy under consolidated hits, the default).
void pin_layout(RuntimeConfig& config, const Layout& layout, const std::vector<int>& to_store, const HostStore& store);

}  // namespace mosaic
