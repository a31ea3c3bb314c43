#pragma once
// A sweep config on the simulated clock: every (strategy, rate, repeat) simulated from the variants'
// config.json files and a device profile, reported through the same events as run_sweep — so the
// recorder, the bench table, the reports and the workbench's charts take simulated runs as they
// take served ones (their run config says "clock": "simulated" and names the profile).
#include <filesystem>
#include <string>
#include <vector>

#include "common/outcome.h"
#include "serving/sweep_run.h"
#include "sim/device_profile.h"
#include "sim/model_shapes.h"

namespace mosaic {

struct SimFamily {
  ModelShapes shapes;
  std::vector<std::string> names;  // the variants, as the engine would name them (model/variant_folders.h)
};

// Reads only each variant's config.json. Throws what discover_variants and load_model_spec throw,
// and MismatchError naming the variant whose config differs from the first's.
SimFamily load_sim_family(const std::vector<std::filesystem::path>& dirs);

// Ok when every run finished, Cancelled when an event stopped it, Failed with what the strategies
// throw (BudgetError, UnsupportedError for a strategy not simulated) or the subscribers throw.
Outcome<> simulate_sweep(const SweepConfig& config, const SimFamily& family, const DeviceProfile& device, const SweepEvents& events = {});

}  // namespace mosaic
