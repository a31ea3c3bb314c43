#pragma once
// How `generate`, `logits` and `eval ppl` reach the engine. With --model DIR one checkpoint (or an
// ESFT adapter over its base) is served with every expert resident; with --variants D… (--layout L |
// --capacity N) several are served by the multi-variant runtime. Either way requests go through one
// Engine, all at once, as one continuous batch.
#include <CLI/CLI.hpp>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/capacity.h"
#include "analysis/layout.h"
#include "runtime/engine.h"
#include "serving/served_family.h"

namespace mosaic::cli {

struct ServingArgs {
  std::filesystem::path model;
  std::filesystem::path base;      // with --model: an adapter's base where its expert_cfg.json names none
  std::string host_budget;         // --host-budget: the host tier's RAM ("" or "all": every distinct tensor)
  std::vector<std::filesystem::path> variants;
  std::filesystem::path layout, stats;
  std::filesystem::path resident;  // with --model: a fixed resident set per layer (masked gating)
  std::string target, hit = "consolidated", miss = "transient", budget;
  std::int64_t miss_slots = -1;
  std::int64_t capacity = -1;  // without --layout: plan one (round-robin) with this many resident experts
  std::vector<std::int64_t> layer_slots;  // not a flag: a family changed while serving plans into its runtime's slots a layer
  bool no_reconfig = false;    // keep layout variant 0's non-expert weights (the paper's ablation)
  std::string resident_sets = "auto";  // K, or auto: every set the targets use, budget permitting
  std::int64_t max_sequences = 256;
  std::optional<bool> swap_ahead;  // fill waiting requests' sets into free buffers while the batch decodes; nullopt: where K ≥ 2
  std::string admission = "affinity";  // fcfs: the paper's arrival order
  double max_wait = SchedulerOptions::kDefaultMaxWait;
  bool park = false;
  double residency = SchedulerOptions::kDefaultResidency;
  std::string kv_admission = "greedy";
  std::string device = "cpu";
  std::string cpu_weights = "stored";  // stored: bf16 weights stay bf16 on the CPU backend; fp32: widened when loaded

  // `with_target` false: no --target (a server's requests each name their model).
  void add_to(CLI::App* cmd, bool with_model = true, bool with_target = true);
  std::vector<std::filesystem::path> inputs() const;  // what is read: --model, --variants, --layout
};

// The device a --device names, checked to be usable here (DeviceError says why not: exit 2).
Device checked_device(const std::string& name);
// --cpu-weights: stored, fp32 or mapped; throws InvalidArgument for another name.
CpuWeights checked_cpu_weights(const std::string& name);

// What is served (the family, its host store, the layout, the runtime's config: served_family.h),
// and the runtime and engine serving it.
struct ServingSession : ServedFamily {
  std::shared_ptr<Runtime> runtime;
  std::unique_ptr<Engine> engine;
  std::string target;  // --target, or the --model's variant
};

// Throws mosaic::Error for missing or conflicting options, an unknown policy or target, or a layout
// that does not match the variants (including changed checkpoints). `need_target`: --target must
// name a variant (or --model be given). `build`: how far to go — the config alone (for a change
// served in place), a runtime (for an engine that runs), or an engine too.
enum class Build { Config, Runtime, Engine };
std::unique_ptr<ServingSession> open_serving(const ServingArgs& args, bool need_target = true, Build build = Build::Engine);

// Submits every request at once and waits for all; throws InvalidArgument with the first failure.
std::vector<RequestResult> serve_all(ServingSession& session, std::vector<ServeRequest> requests);

// Writes what serving cost (per request and in total) and what the engine did, as JSON, atomically.
void write_serving_stats(const std::filesystem::path& path, const ServingSession& session,
                         const std::vector<ServeRequest>& requests, const std::vector<RequestResult>& results);

// The reserve's flags (--context, --requests, --prefill-chunk and, when asked, --miss-slots), bounded
// as a session file bounds them.
void add_reserve_options(CLI::App* cmd, ReserveSpec& reserve, bool miss_slots);

// --host-budget's value: the bytes the host tier keeps in RAM, or nullopt for every distinct tensor
// ("" or "all"). Throws InvalidArgument naming the flag.
std::optional<std::uint64_t> host_budget_bytes(const std::string& text);

}  // namespace mosaic::cli
