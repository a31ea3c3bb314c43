#pragma once
// What a front end serves, assembled once (the command line's generate, logits, eval, serve and
// bench-serve; the workbench's Session assembles its layouts with the same layout_config and
// plan_layout): one checkpoint with every expert resident (an adapter over its base; or a fixed
// resident set behind masked gating), or several variants under a layout — a file, served within the
// budget and reserve it records, or one planned now from a capacity or a budget (plan_layout).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "analysis/layout.h"
#include "model/family.h"
#include "runtime/host_store.h"
#include "runtime/runtime.h"
#include "serving/layout_serving.h"

namespace mosaic {

struct ServeAsk {
  // One of these two.
  std::filesystem::path model;                   // one checkpoint (or an ESFT adapter)
  std::vector<std::filesystem::path> variants;   // several, under a layout
  std::filesystem::path base;                    // with model: an adapter's base where its expert_cfg.json names none
  std::filesystem::path resident;                // with model: {"<layer>": [experts]} resident, the router masked to them
  std::filesystem::path layout;                  // with variants: a layout file; else one planned from
  std::optional<std::int64_t> capacity;          //   this many resident experts, or choices.budget
  std::vector<std::int64_t> layer_caps;          //   at most this many a layer (a family changed in place)
  bool no_reconfig = false;                      // the layout's first variant's non-expert set serves all
  std::optional<std::uint64_t> host_budget;      // the host tier's RAM (nullopt: every distinct tensor)
  ServingChoices choices;
  std::optional<std::filesystem::path> cache_dir;  // the family analysis's cache (default_cache_dir())
  std::function<void(const std::string&)> warn;    // what a cache could not keep, said (may be empty)
};

struct ServedFamily {
  Family family;
  std::unique_ptr<HostStore> store;
  Layout layout;         // with variants: the one served
  RuntimeConfig config;  // what a runtime serving it is built with
  std::string model;     // with model: its target's name
};

// Fills `out` (a fresh one; the store refers to its family). Throws InvalidArgument for an ask that
// gives both or neither of model and variants, base or resident without model, or variants without a
// layout, capacity or budget; what opening the family, reading the layout or resident set, matching
// the layout to the variants (changed checkpoints), planning and layout_config throw.
void open_served(ServedFamily& out, const ServeAsk& ask);

}  // namespace mosaic
