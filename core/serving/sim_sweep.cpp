#include "serving/sim_sweep.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "sim/routing_model.h"
#include "runtime/sim_backend.h"
#include "serving/runner.h"

namespace mosaic {

namespace {

// The strategy on a simulated device whose tokens draw their experts from `seed`.
Deployment simulated_deployment(const StrategyConfig& strategy, const HostStore& store, const DeviceProfile& device, HostMemory host,
                                std::uint64_t seed, double concentration) {
  const ModelSpec& s = store.spec();
  return Deployment(strategy, store,
                    std::make_shared<SimulatedDevice>(SimulatedDevice{device, host, drawn_routes(concentration, seed, s.num_experts, s.top_k)}));
}

}  // namespace

std::vector<RequestRecord> simulate_workload(const StrategyConfig& strategy, const HostStore& store, const DeviceProfile& device, HostMemory host,
                                             const std::vector<WorkloadRequest>& workload, std::uint64_t seed, double concentration) {
  return run_workload(simulated_deployment(strategy, store, device, host, seed, concentration), workload, {.clock = RunClock::Simulated});
}

Outcome<> simulate_sweep(const SweepConfig& config, const SimFamily& family, const DeviceProfile& device, const SweepEvents& events) {
  return Outcome<>::of([&]() -> Outcome<> {
    if (config.clock != RunClock::Simulated)
      throw InvalidArgument("sweep", "clock", "is not 'simulated'", "serve it with run_sweep (serving/sweep_run.h)");
    const std::vector<WorkloadRequest> trace = config.trace.empty() ? std::vector<WorkloadRequest>{} : read_trace(config.trace);
    const ModelSpec& spec = family.shapes.spec;
    check_sweep_workload(config, spec, trace);
    const std::unique_ptr<HostStore> store = sim_store(family);
    // Each strategy's targets, as a served sweep takes them: the sweep's, which every strategy must
    // serve, or what its deployment serves (esft: the adapters, delta: the delta folders).
    std::vector<std::vector<std::string>> targets;
    for (const StrategyConfig& sc : config.strategies) {
      const Deployment d = simulated_deployment(sc, *store, device, config.host_memory, config.workload.seed, 0);
      for (const std::string& t : config.targets) d.partition_of(t);
      targets.push_back(config.targets.empty() ? d.targets() : config.targets);
    }
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
    std::vector<double> rates = config.trace.empty() ? config.rates : std::vector<double>{0.0};
    nlohmann::json saturation;  // how the rates were chosen, recorded with every run; null for fixed rates
    std::vector<SaturationProbe> probes;
    if (config.saturation) {
      for (std::size_t i = 0; i < config.strategies.size(); ++i) {
        const StrategyConfig& sc = config.strategies[i];
        const Deployment deployment = simulated_deployment(sc, *store, device, config.host_memory, config.workload.seed, concentration);
        const auto burst = burst_workload(config, targets[i], spec.vocab_size,
                                          burst_size(*config.saturation, sc.scheduler.max_sequences, deployment.partitions().size()));
        const std::string name = strategy_label(sc);
        const auto records = run_workload(deployment, burst, {.clock = RunClock::Simulated});
        if (events.probe_progress && !events.probe_progress(name, records.size(), records.size())) return Cancelled{};
        probes.push_back(saturation_probe(name, records));
      }
      rates = saturation_sweep_rates(*config.saturation, config.workload.duration_seconds, probes);
      saturation = saturation_json(probes);
      if (events.rates_chosen) events.rates_chosen(probes, rates);
    }
    for (std::size_t i = 0; i < config.strategies.size(); ++i) {
      const StrategyConfig& sc = config.strategies[i];
      const std::string name = strategy_label(sc);
      for (double rate : config.saturation ? strategy_rates(rates, *config.saturation, probes[i]) : rates)
        for (int rep = 0; rep < config.repeats; ++rep) {
          const SweepWorkload w = sweep_workload(config, targets[i], rate, rep, spec.vocab_size, trace);
          nlohmann::json run_config = {{"strategy", name}, {"rate", w.rate}, {"repeat", rep}, {"seed", w.seed},
                                             {"capacity", sc.capacity}, {"max_sequences", sc.scheduler.max_sequences},
                                             {"trace", config.trace.string()}, {"clock", "simulated"},
                                             {"device_profile", device.name}, {"routing", routing}, {"targets", family.names()},
                                             {"sweep", nlohmann::json::parse(config.text, nullptr, false)}};
          if (!saturation.is_null()) run_config["saturation"] = saturation;
          SweepRun run{name, w.rate, rep, run_config.dump(), 0};
          if (events.run_started) events.run_started(run, w.requests.size());
          const auto records = simulate_workload(sc, *store, device, config.host_memory, w.requests, w.seed, concentration);
          // Events in finishing order, as a served run reports them.
          std::vector<std::size_t> order(records.size());
          for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
          std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return records[a].stats.finish < records[b].stats.finish; });
          bool stopped = false;
          for (std::size_t k = 0; k < order.size() && !stopped; ++k)
            if (events.request_finished && !events.request_finished(run, records[order[k]], k + 1, order.size())) stopped = true;
          if (events.run_finished) events.run_finished(run, records, summarize(records), stopped);
          if (stopped) return Cancelled{};
        }
    }
    return std::monostate{};
  });
}

}  // namespace mosaic
