#pragma once
// A QoS sweep: strategies × total arrival rates × repeats over one family, as a JSON config
// ("mosaic.sweep/1") that `mosaic-cli bench --config` runs and records:
//   {"schema": "mosaic.sweep/1", "variants": [dirs, relative to the config file],
//    "clock": "virtual" | "real" | "simulated", "repeats": n, "seed": s,
//    "rates": [requests/s]
//             | {"saturation": {"points": n, "from": f, "to": t, "probe_requests": m}} (rates chosen from
//               each strategy's measured saturation rate, serving/saturation.h; defaults 6, 0.25, 2 and
//               0 for probe_requests: four times what the strategy's batches hold),
//    "device": "cpu" | "cuda" (virtual and real clocks: the backend every strategy runs on; default cpu,
//              the fp32 reference; `bench --device` overrides it),
//    "cpu_weights": "stored" | "fp32" | "mapped" (virtual and real clocks, the CPU backend: bf16 weights
//                   held as stored, the default, widened to fp32 copies, or read where the checkpoints
//                   are mapped; `bench --cpu-weights` overrides it),
//    "device_profile": "profile.json" (simulated only, relative to the config: the device the cost
//                      model prices steps for, sample_configs/devices/),
//    "routing": "model.json" (simulated only, relative to the config: how tokens choose experts,
//               sim/routing_model.h, measured by `mosaic-cli routing`; default uniform top-k),
//    "host_budget": "16GiB" (virtual and real clocks: the host tier's budget, runtime/host_tier.h: the
//                   distinct weight bytes kept in RAM, the rest read from disk; default all;
//                   `bench --host-budget` overrides it),
//    "host_memory": {"experts": "pinned" | "pageable", "non_expert": "pinned" | "pageable"}
//                   (simulated only: which link rate each kind of copy gets; default pinned),
//    "alpha": skew in (0, 1] (1: even), "duration_seconds": t, "prompt": [min, max], "output": [min, max],
//    "strategies": [{"kind": "consolidated" | "no-reconfig" | "single" | "single-resident" | "time-sharing" | "space-sharing"
//                            | "averaging" | "esft" | "delta" | "hybrid" | "virtual-experts",
//                    "capacity": n, "budget": "12GiB", "hit": …, "miss": "transient" | "lru" | "prefetch" | "prefetch-always" | "masked",
//                    "single_target": name,
//                    "resident_sets": "auto" (default: every set the targets use, budget permitting;
//                                     with a budget and no capacity, room for a second set where it
//                                     costs at most 1/8 of the positions: analysis/capacity.h) | K,
//                    "max_sequences": n (1: one request at a time), "max_batch_tokens": n,
//                    "admission": "affinity" (default: resident sets' requests first, then the set
//                                 with the most queued work, weighed by its oldest's wait) | "fcfs"
//                                 (arrival order: the paper's setting); "switching" is its older name,
//                    "max_wait_seconds": s (affinity's fairness bound, default 2),
//                    "park": false | true (affinity: a running set makes room for another by
//                                      draining, or by parking its sequences with their KV
//                                      blocks; SchedulerOptions::park),
//                    "residency_seconds": s (park: the shortest turn of a set switched in,
//                                        default 0.1; its turn is its share of the work left
//                                        times max_wait_seconds where that is longer),
//                    "kv_admission": "greedy" | "reserve" (how a request's KV blocks are counted
//                                    when it joins: SchedulerOptions::kv_admission),
//                    "swap_ahead": false | true (look-ahead swaps, runtime/scheduler.h: waiting
//                                  requests' sets filled into free buffers while the batch decodes;
//                                  default: on wherever two sets or more are resident; not
//                                  time-sharing or space-sharing),
//                    "kv_context": tokens, "kv_requests": n (the KV reserve under a budget),
//                    virtual-experts only: "calibration": "text file" (relative to the config; with a
//                    budget, plan-virtual's counts; without, uniform counts from the capacity or the
//                    budget), "staging": slots per layer, "update_every": steps, "decay", "shift",
//                    "name": what its runs are recorded as (optional: default its kind, "+prefetch",
//                    "+ahead"; strategies that would share that are named by the settings they
//                    differ in, "consolidated (capacity 64)"; names that still meet are refused)}, …],
//    "targets": [names] (optional: the variants workloads draw from, for every strategy; default:
//               every variant, or for esft the adapters and for delta and hybrid the delta folders),
//    "trace": "file.jsonl" (optional, relative to the config: replayed instead of generated; the
//              rates are then not used),
//    "trace_routes": true (optional: record where every token's router choices went, per request;
//                    the workbench's Runs panel shows a request's expert trace from them)}
// On the simulated clock no weights are read and nothing is computed: the engine serves the
// variants' config.json files on a simulated device (serving/sim_sweep.h), so a family too large
// for this machine can be swept.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "serving/runner.h"
#include "sim/device_profile.h"

namespace mosaic {

// Rates from measured service (serving/saturation.h): `points` rates, geometric from `from` × the
// slowest strategy's saturation rate to `to` × the fastest's, each measured by a burst of
// `probe_requests` requests (0: four times what the strategy's batches hold).
struct SaturationRates {
  int points = 6;
  double from = 0.25, to = 2.0;
  int probe_requests = 0;
};

struct SweepConfig {
  std::vector<std::filesystem::path> variants;
  RunClock clock = RunClock::Virtual;
  std::vector<double> rates;                 // empty when `saturation` chooses them
  std::optional<SaturationRates> saturation;
  int repeats = 1;
  WorkloadSpec workload;  // targets, rates and vocabulary are filled in per run
  std::vector<StrategyConfig> strategies;
  std::filesystem::path trace;  // empty: generate Poisson workloads
  std::vector<std::string> targets;  // the names workloads draw from; empty: each strategy's own
  bool trace_routes = false;  // record each request's routes (RequestRecord::routes)
  Device device = Device::Cpu;  // every strategy's backend (StrategyConfig::device), engine clocks only
  CpuWeights cpu_weights = CpuWeights::Stored;  // on the CPU backend (StrategyConfig::cpu_weights)
  std::optional<std::uint64_t> host_budget;  // engine clocks: the host tier's budget; nullopt: every byte in RAM
  std::filesystem::path device_profile;  // simulated clock: the profile's file
  std::filesystem::path routing;         // simulated clock: a routing model's file; empty: uniform
  HostMemory host_memory;                // simulated clock: the link rate of each kind of copy
  std::string text;       // the config as written, recorded with every run
};

// Throws IoError, FormatError naming the field (and what is allowed), or UnsupportedError for
// another schema version.
SweepConfig load_sweep_config(const std::filesystem::path& path);
// The same from text; `file` names it in errors, relative paths are resolved against `base_dir`.
SweepConfig parse_sweep_config(const std::string& text, const std::string& file, const std::filesystem::path& base_dir);
// Serves every strategy of `config` on `device` (what `bench --device` and the workbench's selector
// ask for), recorded as if the config had said so. InvalidArgument on the simulated clock.
void set_sweep_device(SweepConfig& config, Device device);
// The host budget every strategy's host store keeps (`bench --host-budget`), recorded likewise.
// InvalidArgument on the simulated clock.
void set_sweep_host_budget(SweepConfig& config, std::optional<std::uint64_t> bytes);
// How the CPU backend holds every strategy's weights (`bench --cpu-weights`), recorded likewise.
// InvalidArgument on the simulated clock.
void set_sweep_cpu_weights(SweepConfig& config, CpuWeights weights);

}  // namespace mosaic
