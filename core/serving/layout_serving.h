#pragma once
// What a layout file serves, the same wherever it is opened (the workbench's Session, the CLI's
// --layout): the experts it pins — a hybrid layout's deltas with them; a virtual layout's initial
// set, behind masked gating that updates.
#include <cstdint>
#include <optional>
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

// `config`'s pins and virtual experts, as the layout says: last, since a virtual layout also sets the
// hit and miss policies and the reserve's miss slots; the rest is left as it is (a hybrid layout's
// rows without their delta resident take the base's copy under consolidated hits, the default).
void pin_layout(RuntimeConfig& config, const Layout& layout, const std::vector<int>& to_store, const HostStore& store);

}  // namespace mosaic
