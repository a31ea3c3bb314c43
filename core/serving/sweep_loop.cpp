#include "serving/sweep_loop.h"

#include <atomic>

#include "serving/saturation.h"

namespace mosaic {

Outcome<> sweep_loop(const SweepConfig& config, const ModelSpec& spec, const std::vector<WorkloadRequest>& trace, const SweepServer& server,
                     const SweepEvents& events) {
  // A strategy's deployment for the sweep's seed, serving the sweep's targets (every strategy serves
  // them, or none runs); its targets are the sweep's, or what it serves (esft: the adapters).
  auto targets_of = [&](const Deployment& d) { return config.targets.empty() ? d.targets() : config.targets; };
  auto deploy = [&](const StrategyConfig& sc, std::uint64_t seed) {
    std::unique_ptr<Deployment> d = server.deploy(sc, seed);
    for (const std::string& t : config.targets) d->partition_of(t);
    if (server.warm_up) server.warm_up(*d, targets_of(*d));
    return d;
  };
  std::vector<double> rates = config.trace.empty() ? config.rates : std::vector<double>{0.0};
  nlohmann::json saturation;  // how the rates were chosen, recorded with every run; null for fixed rates
  std::vector<SaturationProbe> probes;
  if (config.saturation) {
    for (const StrategyConfig& sc : config.strategies) {
      const auto deployment = deploy(sc, config.workload.seed);
      bool stopped = false;
      RunOptions o = server.options;
      o.progress = [&](std::size_t done, std::size_t total) {
        stopped = stopped || (events.probe_progress && !events.probe_progress(deployment->name(), done, total));
        return !stopped;
      };
      const auto burst = run_workload(*deployment,
                                      burst_workload(config, targets_of(*deployment), spec.vocab_size,
                                                     burst_size(*config.saturation, sc.scheduler.max_sequences, deployment->partitions().size())),
                                      o);
      if (stopped) return Cancelled{};
      probes.push_back(saturation_probe(deployment->name(), burst));
    }
    rates = saturation_sweep_rates(*config.saturation, config.workload.duration_seconds, probes);
    saturation = saturation_json(probes);
    if (events.rates_chosen) events.rates_chosen(probes, rates);
  }
  for (std::size_t i = 0; i < config.strategies.size(); ++i) {
    const StrategyConfig& sc = config.strategies[i];
    const std::unique_ptr<Deployment> strategy = deploy(sc, config.workload.seed);
    const std::vector<std::string> targets = targets_of(*strategy);
    for (double rate : config.saturation ? strategy_rates(rates, *config.saturation, probes[i]) : rates)
      for (int rep = 0; rep < config.repeats; ++rep) {
        const SweepWorkload sw = sweep_workload(config, targets, rate, rep, spec.vocab_size, trace);
        const std::unique_ptr<Deployment> own = server.per_run ? deploy(sc, sw.seed) : nullptr;
        const Deployment& deployment = own ? *own : *strategy;
        nlohmann::json run_config = server.recorded ? server.recorded(deployment) : nlohmann::json::object();
        run_config.update({{"strategy", deployment.name()}, {"rate", sw.rate}, {"repeat", rep}, {"seed", sw.seed}, {"capacity", sc.capacity},
                           {"max_sequences", sc.scheduler.max_sequences}, {"trace", config.trace.string()},
                           {"sweep", nlohmann::json::parse(config.text, nullptr, false)}});
        if (!saturation.is_null()) run_config["saturation"] = saturation;
        SweepRun run{deployment.name(), sw.rate, rep, run_config.dump(), 0};
        if (events.run_started) events.run_started(run, sw.requests.size());
        std::atomic<bool> stopped{false};
        RequestRecord last;  // a copy: the runner moves its record on after on_finished
        RunOptions o = server.options;
        o.on_finished = [&](const RequestRecord& r) { last = r; };
        o.progress = [&](std::size_t done, std::size_t total) {
          if (events.request_finished && !events.request_finished(run, last, done, total)) stopped = true;
          return !stopped.load();
        };
        const auto records = run_workload(deployment, sw.requests, o);
        if (events.run_finished) events.run_finished(run, records, summarize(records), stopped);
        if (stopped) return Cancelled{};
      }
  }
  return std::monostate{};
}

}  // namespace mosaic
