#pragma once
// The options that make `logits` and `generate` run the multi-variant runtime instead of one
// checkpoint: --variants D… (--layout L | --capacity N) --target NAME [--hit …] [--miss …]
// [--budget …] [--no-reconfig] [--stats F].
#include <CLI/CLI.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace mosaic::cli {

struct ServingArgs {
  std::vector<std::filesystem::path> variants;
  std::filesystem::path layout, stats;
  std::string target, hit = "consolidated", miss = "transient", budget;
  std::int64_t miss_slots = -1;
  std::int64_t capacity = -1;
  bool no_reconfig = false;  // keep layout variant 0's non-expert weights (the paper's ablation)  // without --layout: plan one (round-robin) with this many resident experts

  void add_to(CLI::App* cmd);
  bool active() const { return !variants.empty(); }
};

// The family, its host store, the matched layout and a runtime serving them.
struct ServingSession {
  Family family;
  std::unique_ptr<HostStore> store;
  Layout layout;
  std::unique_ptr<Runtime> runtime;
  int target = -1;
};

// Throws mosaic::Error for missing options, an unknown policy or target, or a layout that does not
// match the variants (including changed checkpoints).
std::unique_ptr<ServingSession> open_serving(const ServingArgs& args);

// Writes the counters (and, when given, a request's stats) as JSON, atomically.
void write_serving_stats(const std::filesystem::path& path, const ServingSession& session,
                         const RuntimeCounters& counters, const RequestStats* request = nullptr);

}  // namespace mosaic::cli
