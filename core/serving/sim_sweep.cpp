#include "serving/sim_sweep.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "sim/routing_model.h"
#include "runtime/sim_backend.h"
#include "serving/runner.h"
#include "serving/sweep_loop.h"

namespace mosaic {

namespace {

// The strategy on a simulated device whose tokens draw their experts from `seed`.
std::unique_ptr<Deployment> simulated_deployment(const StrategyConfig& strategy, const HostStore& store, const DeviceProfile& device,
                                                 HostMemory host, std::uint64_t seed, double concentration) {
  const ModelSpec& s = store.spec();
  return std::make_unique<Deployment>(
      strategy, store, std::make_shared<SimulatedDevice>(SimulatedDevice{device, host, drawn_routes(concentration, seed, s.num_experts, s.top_k)}));
}

}  // namespace

std::vector<RequestRecord> simulate_workload(const StrategyConfig& strategy, const HostStore& store, const DeviceProfile& device, HostMemory host,
                                             const std::vector<WorkloadRequest>& workload, std::uint64_t seed, double concentration) {
  return run_workload(*simulated_deployment(strategy, store, device, host, seed, concentration), workload, {.clock = RunClock::Simulated});
}

Outcome<> simulate_sweep(const SweepConfig& config, const SimFamily& family, const DeviceProfile& device, const SweepEvents& events) {
  return Outcome<>::of([&]() -> Outcome<> {
    if (config.clock != RunClock::Simulated)
      throw InvalidArgument("sweep", "clock", "is not 'simulated'", "serve it with run_sweep (serving/sweep_run.h)");
    const std::vector<WorkloadRequest> trace = config.trace.empty() ? std::vector<WorkloadRequest>{} : read_trace(config.trace);
    const ModelSpec& spec = family.shapes.spec;
    check_sweep_workload(config, spec, trace);
    const std::unique_ptr<HostStore> store = sim_store(family);
    double concentration = 0;
    nlohmann::json routing = "uniform";  // recorded with every run
    if (!config.routing.empty()) {
      const RoutingModel r = load_routing_model(config.routing);
      if (r.experts != spec.num_experts || r.top_k != spec.top_k)
        throw MismatchError(config.routing.string(), "experts and top_k",
                            "were measured on " + std::to_string(r.experts) + " experts, top-" + std::to_string(r.top_k) + "; this family routes " +
                                std::to_string(spec.num_experts) + ", top-" + std::to_string(spec.top_k),
                            "measure a routing model on a variant of this architecture (mosaic-cli routing), or fit one to its published overlap (--overlap)");
      concentration = r.concentration;
      routing = {{"file", config.routing.filename().string()}, {"source", r.source}, {"concentration", r.concentration}, {"distinct", r.distinct},
                 {"prompt_tokens", r.prompt_tokens}};
    }
    // A fresh simulated device for every run, its tokens' experts drawn from the run's seed.
    const SweepServer server{.deploy =
                                 [&](const StrategyConfig& sc, std::uint64_t seed) {
                                   return simulated_deployment(sc, *store, device, config.host_memory, seed, concentration);
                                 },
                             .per_run = true,
                             .options = {.clock = RunClock::Simulated},
                             .recorded = [&](const Deployment&) {
                               return nlohmann::json{{"clock", "simulated"}, {"device_profile", device.name}, {"routing", routing}, {"targets", family.names()}};
                             }};
    return sweep_loop(config, spec, trace, server, events);
  });
}

}  // namespace mosaic
