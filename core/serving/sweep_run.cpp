#include "serving/sweep_run.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <random>

#include "common/error.h"
#include "serving/runner.h"
#include "serving/sweep_loop.h"
#include "serving/strategy.h"
#include "serving/workload.h"

namespace mosaic {
namespace {

// One short request per target, served and dropped before a deployment's first measured run. What
// a fresh deployment does once (loading its resident sets and spares, first touches of its buffers,
// growing its KV) stays out of the measurements, and the first run starts as the later ones do: from
// the state the runs before left.
std::vector<WorkloadRequest> warm_up_workload(const std::vector<std::string>& targets, std::size_t prompt_tokens, std::int64_t vocab) {
  std::vector<WorkloadRequest> w;
  for (const std::string& t : targets) {
    WorkloadRequest r{.arrival = 0, .target = t, .prompt = {}, .max_new_tokens = 2};
    for (std::size_t i = 0; i < std::max<std::size_t>(prompt_tokens, 1); ++i) r.prompt.push_back(static_cast<std::int64_t>(i + 1) % vocab);
    w.push_back(std::move(r));
  }
  return w;
}

}  // namespace

SweepWorkload sweep_workload(const SweepConfig& config, const std::vector<std::string>& targets, double rate, int repeat,
                             std::int64_t vocab_size, const std::vector<WorkloadRequest>& trace) {
  WorkloadSpec spec = config.workload;
  spec.targets = targets;
  spec.total_rate = rate;
  spec.vocab_size = vocab_size;
  spec.seed = config.workload.seed + static_cast<std::uint64_t>(repeat);
  SweepWorkload w{config.trace.empty() ? generate_workload(spec) : trace, rate, spec.seed};
  // A trace's rate is what it holds.
  if (!config.trace.empty() && w.requests.size() >= 2)
    w.rate = static_cast<double>(w.requests.size()) / std::max(w.requests.back().arrival, 1e-9);
  return w;
}

void check_sweep_workload(const SweepConfig& config, const ModelSpec& spec, const std::vector<WorkloadRequest>& trace) {
  if (config.trace.empty() && config.workload.prompt.max + config.workload.output.max > spec.max_position_embeddings)
    throw FormatError("sweep config", "fields 'prompt' and 'output'",
                      "ask for up to " + std::to_string(config.workload.prompt.max + config.workload.output.max) +
                          " positions; the model's context is " + std::to_string(spec.max_position_embeddings),
                      "shorten the prompts or the outputs");
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const WorkloadRequest& r = trace[i];
    const std::string where = "request " + std::to_string(i + 1);
    for (std::int64_t id : r.prompt)
      if (id >= spec.vocab_size)
        throw FormatError(config.trace.string(), where + ": field 'prompt'",
                          "holds token id " + std::to_string(id) + ", outside the vocabulary [0, " + std::to_string(spec.vocab_size) + ")");
    // On the real clock a replay lasts as long as its trace: bounded by the run's duration, as a
    // generated workload is (an arrival a week away would otherwise hold the sweep a week).
    if (config.clock == RunClock::Real && r.arrival > config.workload.duration_seconds)
      throw FormatError(config.trace.string(), where + ": field 'arrival'",
                        "is " + std::to_string(r.arrival) + " s, past the run's duration_seconds (" +
                            std::to_string(config.workload.duration_seconds) + " s) on the real clock",
                        "raise duration_seconds in the sweep config to replay it in full, or replay it on the virtual clock");
    if (static_cast<std::int64_t>(r.prompt.size()) + r.max_new_tokens > spec.max_position_embeddings)
      throw FormatError(config.trace.string(), where,
                        "asks for " + std::to_string(r.prompt.size() + static_cast<std::size_t>(r.max_new_tokens)) +
                            " positions (prompt and max_new_tokens); the model's context is " + std::to_string(spec.max_position_embeddings));
  }
}

Outcome<> run_sweep(const SweepConfig& config, const Family& family, const HostStore& store, const FamilyAnalysis& analysis,
                    const SweepEvents& events, Engine* shared) {
  return Outcome<>::of([&]() -> Outcome<> {
    if (config.clock == RunClock::Simulated)
      throw InvalidArgument("sweep", "clock 'simulated'", "serves the variants' config files on a simulated device, not an opened family",
                            "run it with simulate_sweep (serving/sim_sweep.h)");
    if (const auto why = device_unavailable(config.device))
      throw DeviceError("sweep", "device '" + std::string(device_name(config.device)) + "'", *why,
                        "set \"device\": \"cpu\" in the sweep config (or --device cpu), or run it on a machine with an NVIDIA GPU");
    const std::string device = device_description(config.device);  // recorded with every run
    // Strategies that write merged checkpoints (averaging) put them here, removed afterwards.
    const auto scratch = std::filesystem::temp_directory_path() / ("mosaic-sweep-" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(scratch);
    struct Cleanup {
      std::filesystem::path d;
      ~Cleanup() {
        std::error_code ec;
        std::filesystem::remove_all(d, ec);
      }
    } cleanup{scratch};

    const std::vector<WorkloadRequest> trace = config.trace.empty() ? std::vector<WorkloadRequest>{} : read_trace(config.trace);
    check_sweep_workload(config, store.spec(), trace);
    const ModelSpec& spec = store.spec();
    // One deployment per strategy, warmed up before its first measured run.
    std::size_t warm_prompt = static_cast<std::size_t>(config.workload.prompt.max);  // the workload's longest prompt
    if (!trace.empty())
      warm_prompt = std::max_element(trace.begin(), trace.end(), [](const auto& a, const auto& b) { return a.prompt.size() < b.prompt.size(); })
                        ->prompt.size();
    SweepServer server{.deploy = [&](const StrategyConfig& sc,
                                     std::uint64_t) { return std::make_unique<Deployment>(sc, family, store, analysis, scratch); },
                       .warm_up =
                           [&](const Deployment& deployment, const std::vector<std::string>& targets) {
                             run_workload(deployment, warm_up_workload(targets, warm_prompt, spec.vocab_size), {.clock = config.clock, .engine = shared});
                           },
                       .options = {.clock = config.clock, .engine = shared, .trace_routes = config.trace_routes},
                       .recorded = [&](const Deployment& deployment) {
                         // What a recorded route's served_by indexes: the targets of the store the
                         // deployment serves from (averaging serves merged checkpoints of its own).
                         std::vector<std::string> targets;
                         const HostStore& served = deployment.partitions().front().runtime->store();
                         for (int t = 0; t < served.targets(); ++t) targets.push_back(served.name(t));
                         return nlohmann::json{{"clock", config.clock == RunClock::Real ? "real" : "virtual"}, {"device", device}, {"targets", targets}};
                       }};
    return sweep_loop(config, spec, trace, server, events);
  });
}

}  // namespace mosaic
