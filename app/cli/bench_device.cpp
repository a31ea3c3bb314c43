// bench-device: a device profile (mosaic.device/1) measured through Mosaic's own engine on this
// machine's CPU or GPU, for the simulated clock (sweep configs' "clock": "simulated").
//
// The profile's numbers are fitted to steps the runtime ran (sim/profile_fit.h): small synthetic
// models for the per-kernel and per-step overhead, decode of a larger one for the bandwidth its
// kernels reach, a long prefill for its matmul rate. Copies are the runtime's own: expert loads on a
// miss (h2d_pinned) and non-expert swaps (h2d_pageable). Micro-benchmarks are printed beside them as
// the hardware's floor, and every measured step beside the fitted profile's price of it.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "cli/output_paths.h"
#include "cli/serving_args.h"
#include "cli/step_decoder.h"
#include "common/atomic_file.h"
#include "model/synthetic.h"
#include "runtime/cuda/cuda_probe.h"
#include "runtime/engine.h"
#include "runtime/matmul_yardstick.h"
#include "runtime/threads.h"
#include "sim/profile_fit.h"

namespace fs = std::filesystem;

namespace mosaic::cli {
namespace {

struct Opts {
  std::string device = "cpu", name;
  fs::path out, dir = "bench-device-family";
  int threads = 0, steps = 24;
  // The larger model (bandwidth- and compute-bound steps); 0: sized for the device.
  std::int64_t hidden = 0, intermediate = 0, layers = 0, prefill = 0;
  std::vector<fs::path> check;  // checkpoints whose steps are priced with the fitted profile, not fitted to
  fs::path like;                // a config.json whose architecture the synthetic models take
};

// A family whose steps are timed: two synthetic variants written once into `dir` and reused, or a
// checkpoint of the user's (--check).
struct TimedFamily {
  ModelSpec spec;
  Family family;
  std::unique_ptr<HostStore> store;
  ModelShapes shapes;

  TimedFamily(const fs::path& dir, const ModelSpec& s) : spec(s) {
    for (int v = 0; v < 2; ++v) {
      const fs::path d = dir / ("variant-" + std::to_string(v));
      if (!fs::exists(d / "model.safetensors")) write_synthetic_checkpoint(d, spec, DType::BF16, 40 + static_cast<std::uint64_t>(v));
      family.add("v" + std::to_string(v), d);
    }
    store = std::make_unique<HostStore>(family);
    shapes = model_shapes(store->spec(), 2);
  }
  // Its own weights, shapes from its config.
  explicit TimedFamily(const fs::path& checkpoint) {
    family.add("v0", checkpoint);
    store = std::make_unique<HostStore>(family);
    spec = store->spec();
    shapes = load_model_shapes(checkpoint / "config.json");
  }
};

// The synthetic models' architecture: Mixtral's, or that of a config the profile is meant for (--like),
// so that its own kernels (query/key norms, shared experts, dense layers) are in the overhead fitted.
ModelSpec spec_of(const std::optional<ModelSpec>& like, std::int64_t vocab, std::int64_t hidden, std::int64_t intermediate,
                  std::int64_t layers, std::int64_t head_dim) {
  ModelSpec s = like ? *like : mixtral_like_spec(vocab, hidden, intermediate, layers, 8);
  if (like) {
    const ModelSpec& m = *like;
    s.vocab_size = vocab, s.hidden_size = hidden, s.expert_intermediate = intermediate, s.num_layers = layers;
    if (s.shared_expert_intermediate > 0) s.shared_expert_intermediate = intermediate;
    if (s.dense_intermediate > 0) s.dense_intermediate = intermediate;
    s.num_experts = std::min<std::int64_t>(m.num_experts, 64);
    s.top_k = std::min(m.top_k, s.num_experts);
    s.sparse_layers.assign(static_cast<std::size_t>(layers), true);
    for (std::int64_t l = 0; l < layers && l < m.num_layers; ++l) s.sparse_layers[static_cast<std::size_t>(l)] = m.is_sparse(l);
  }
  s.head_dim = head_dim;
  s.num_heads = hidden / head_dim;
  s.num_kv_heads = std::max<std::int64_t>(1, s.num_heads / 2);
  return s;
}

// The work of the decoder's last step as the cost model counts it, from its traced routes.
StepWork work_of(const StepDecoder& d, const ModelSpec& spec) {
  StepWork w;
  w.groups = 1;
  for (const auto& c : d.last_chunks()) w.chunks.push_back({c.tokens, c.context});
  w.emitted = static_cast<std::int64_t>(d.last_chunks().size());
  w.expert_rows.resize(static_cast<std::size_t>(spec.num_layers));
  std::vector<std::map<std::pair<int, int>, std::int64_t>> rows(static_cast<std::size_t>(spec.num_layers));
  for (const auto& seq : d.last().routes)
    for (const RoutedExpert& r : seq) ++rows[static_cast<std::size_t>(r.layer)][{r.served_by, r.served_expert}];
  for (std::size_t l = 0; l < rows.size(); ++l)
    for (const auto& [key, n] : rows[l]) w.expert_rows[l].push_back(n);
  return w;
}

// `steps` timed steps of `batch` sequences (after the prefill and two warm-up steps), every expert
// of variant 0 resident; with `prefill_only`, the prefill alone, `steps` times.
void measure(const TimedFamily& f, Device device, int batch, std::size_t prompt, int steps, bool prefill_only, const std::string& label,
             std::vector<MeasuredStep>& out) {
  Runtime rt(*f.store, RuntimeConfig{.pinned = every_position(f.spec, 0), .hit = HitPolicy::Strict, .device = device});
  rt.make_resident(std::vector<int>{f.store->set_of(0)});
  auto record = [&](StepDecoder& d, double seconds) { out.push_back({&f.shapes, work_of(d, f.spec), seconds, label}); };
  if (prefill_only) {
    StepDecoder warm(rt, *f.store, std::vector<int>(static_cast<std::size_t>(batch), 0), prompt, static_cast<std::int64_t>(prompt) + 1, true);
    warm.step();
    for (int i = 0; i < steps; ++i) {
      StepDecoder d(rt, *f.store, std::vector<int>(static_cast<std::size_t>(batch), 0), prompt, static_cast<std::int64_t>(prompt) + 1, true);
      const double s = d.step();
      record(d, s);
    }
    return;
  }
  StepDecoder d(rt, *f.store, std::vector<int>(static_cast<std::size_t>(batch), 0), prompt, static_cast<std::int64_t>(prompt) + steps + 4, true);
  for (int i = 0; i < 3; ++i) d.step();
  for (int i = 0; i < steps; ++i) {
    const double s = d.step();
    record(d, s);
  }
}

// Bytes per second of expert loads on a miss (nothing pinned, every routed expert loaded), from the
// runtime's own load counters, and of non-expert swaps (one buffer, the two variants alternately).
std::pair<double, double> measure_copies(const TimedFamily& f, Device device) {
  Engine engine(std::make_shared<Runtime>(*f.store, RuntimeConfig{.hit = HitPolicy::Strict, .miss = "transient", .device = device}));
  double load_bytes = 0, load_seconds = 0;
  for (int i = 0; i < 3; ++i) {
    const RequestResult r = engine.submit({"v0", {.prompt = random_tokens(4, 3 + static_cast<std::uint64_t>(i), f.spec.vocab_size), .max_new_tokens = 8}})->wait();
    if (i == 0) continue;  // warm-up
    for (const LayerCounts& c : r.stats.counters.layers) load_bytes += static_cast<double>(c.load_bytes), load_seconds += c.load_seconds;
  }
  Runtime rt(*f.store, RuntimeConfig{.hit = HitPolicy::Strict, .miss = "transient", .device = device});
  double swap_bytes = 0, swap_seconds = 0;
  for (int i = 0; i < 8; ++i)
    for (const SwapRecord& s : rt.make_resident(std::vector<int>{f.store->set_of(i % 2)}))
      if (i >= 2) swap_bytes += static_cast<double>(s.bytes), swap_seconds += s.seconds;  // the first two fill the buffer
  return {load_bytes / load_seconds, swap_bytes / swap_seconds};
}

// "olmoe/base" for tests/data/hf-tiny/olmoe/base: enough to tell checkpoints apart.
std::string name_of(const fs::path& dir) {
  const fs::path d = dir.filename().empty() ? dir.parent_path() : dir;
  return (d.parent_path().filename() / d.filename()).string();
}

std::string today() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

void run_bench_device(const Opts& o) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // Before the measurements: the profile and the synthetic families never land on what is read.
  std::vector<fs::path> inputs = o.check;
  inputs.push_back(o.like);
  check_output(o.out, "--out", inputs);
  check_output(o.dir, "--dir", inputs, OutputKind::Folder);
  const Device device = checked_device(o.device);
  const bool cpu = device == Device::Cpu;
  const int threads = cpu ? configure_threads(o.threads) : 0;
  DeviceProfile start;
  std::string floors;
  if (cpu) {
    const MatmulRate gemv = measure_matmul(1, 4096, 4096), gemm = measure_matmul(256, 2048, 2048);
    start.name = "CPU, " + std::to_string(threads) + " threads";
    start.compute_bytes = 4;  // the CPU backend computes in fp32
    start.memory_bandwidth = gemv.gbytes_per_s * 1e9;
    start.peak_flops = gemm.gflops * 1e9;
    char b[200];
    std::snprintf(b, sizeof b, "LibTorch fp32 GEMV 4096² %.1f GB/s, GEMM 256×2048×2048 %.1f GFLOP/s", gemv.gbytes_per_s, gemm.gflops);
    floors = b;
  } else {
    const cuda::DeviceRates r = cuda::measure_rates();
    start.name = r.name;
    start.compute_bytes = 2;
    start.memory_bandwidth = r.read_bytes_per_s;
    start.peak_flops = r.bf16_flops;
    char b[200];
    std::snprintf(b, sizeof b, "read kernel %.0f GB/s, pinned cudaMemcpy %.1f GB/s, cuBLAS bf16 GEMM %.0f TFLOP/s", r.read_bytes_per_s / 1e9,
                  r.pinned_h2d_bytes_per_s / 1e9, r.bf16_flops / 1e12);
    floors = b;
  }
  if (!o.name.empty()) start.name = o.name;
  std::printf("bench-device: %s (%s)\n  floors: %s\n", start.name.c_str(), o.device.c_str(), floors.c_str());

  const std::int64_t hidden = o.hidden ? o.hidden : cpu ? 1024 : 2048, inter = o.intermediate ? o.intermediate : cpu ? 2048 : 5632;
  const std::int64_t layers = o.layers ? o.layers : cpu ? 4 : 16, prefill = o.prefill ? o.prefill : cpu ? 256 : 4096;
  const auto t_write = std::chrono::steady_clock::now();
  std::optional<ModelSpec> like;
  std::string arch = "mixtral";
  if (!o.like.empty()) {
    like = load_model_shapes(o.like).spec;
    arch = std::string(like->model_type());
  }
  const fs::path dir = o.dir / arch;
  const TimedFamily small2(dir / "small-2", spec_of(like, 320, 64, 128, 2, 16)), small6(dir / "small-6", spec_of(like, 320, 64, 128, 6, 16));
  const TimedFamily large(dir / ("large-" + std::to_string(hidden) + "-" + std::to_string(inter) + "-" + std::to_string(layers)),
                              spec_of(like, cpu ? 8000 : 32000, hidden, inter, layers, 64));
  std::printf("  synthetic families in %s (%.0f s to write and read; the large one %.2f GB bf16 per variant)\n", o.dir.string().c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t_write).count(), double(large.store->host_bytes()) / 2e9);

  MeasuredSteps steps;
  for (const TimedFamily* f : {&small2, &small6})
    for (int batch : {1, 4, 16}) {
      const std::string label = std::to_string(f->spec.num_layers) + "-layer tiny model, decode ×" + std::to_string(batch);
      measure(*f, device, batch, 8, o.steps, false, label, steps.overhead);
      // Prompts: per-chunk attention, every expert busy.
      measure(*f, device, batch, 24, std::max(2, o.steps / 4), true,
              std::to_string(f->spec.num_layers) + "-layer tiny model, prefill 24 ×" + std::to_string(batch), steps.overhead);
    }
  measure(large, device, 1, 8, o.steps, false, "large model, decode ×1", steps.bandwidth);
  measure(large, device, 1, static_cast<std::size_t>(prefill), std::max(2, o.steps / 8), true,
          "large model, prefill of " + std::to_string(prefill), steps.compute);
  const auto [load_rate, swap_rate] = measure_copies(large, device);
  std::vector<std::unique_ptr<TimedFamily>> checked;
  std::vector<MeasuredStep> checks;
  for (const fs::path& c : o.check) {
    checked.push_back(std::make_unique<TimedFamily>(c));
    for (int batch : {1, 4, 16}) {
      measure(*checked.back(), device, batch, 8, o.steps, false, name_of(c) + ", decode ×" + std::to_string(batch), checks);
      measure(*checked.back(), device, batch, 20, std::max(2, o.steps / 4), true, name_of(c) + ", prefill 20 ×" + std::to_string(batch), checks);
    }
  }

  DeviceProfile p = fit_device_profile(start, steps);
  p.h2d_pinned = load_rate;
  p.h2d_pageable = swap_rate;
  char source[900];
  std::snprintf(source, sizeof source,
                "Measured by mosaic-cli bench-device --device %s on %s%s, synthetic models of %s's architecture: launch_us, row_us and sync_us fitted to %zu steps of two tiny "
                "synthetic models (2 and 6 layers, batches 1/4/16) and their 24-token prompts, memory_gb_per_s to %zu decode steps of a %lld-hidden %lld-layer "
                "model, peak_tflops to %zu prefills of %lld tokens; h2d_pinned is the runtime's expert loads on a miss, h2d_pageable its "
                "non-expert swaps. Floors in the same run: %s.",
                o.device.c_str(), today().c_str(), cpu ? (", " + std::to_string(threads) + " threads").c_str() : "", arch.c_str(), steps.overhead.size(),
                steps.bandwidth.size(), static_cast<long long>(hidden), static_cast<long long>(layers), steps.compute.size(),
                static_cast<long long>(prefill), floors.c_str());
  p.source = source;

  std::printf("\nfitted profile\n  memory %.2f GB/s (%.2f of the floor), peak %.1f GFLOP/s (%.2f of the floor), launch %.2f µs, row %.3f µs, sync %.1f µs\n",
              p.memory_bandwidth / 1e9, p.memory_bandwidth / start.memory_bandwidth, p.peak_flops / 1e9, p.peak_flops / start.peak_flops,
              p.launch_seconds * 1e6, p.row_seconds * 1e6, p.sync_seconds * 1e6);
  std::printf("  expert loads %.2f GB/s, non-expert swaps %.2f GB/s\n", load_rate / 1e9, swap_rate / 1e9);
  std::printf("\nmeasured steps against the fitted profile's price (means)\n  %-40s %6s %12s %12s %8s\n", "steps", "count", "measured ms",
              "priced ms", "error");
  for (const auto* kind : {&steps.overhead, &steps.bandwidth, &steps.compute, &checks}) {
    if (kind == &checks && !checks.empty()) std::printf("  not fitted, --check:\n");
    std::map<std::string, std::pair<double, double>> sums;  // label → (measured, priced)
    std::vector<std::string> order;
    std::map<std::string, int> count;
    for (const MeasuredStep& m : *kind) {
      if (!count[m.label]++) order.push_back(m.label);
      sums[m.label].first += m.seconds;
      sums[m.label].second += predicted_seconds(p, m);
    }
    for (const std::string& label : order) {
      const auto [measured, priced] = sums[label];
      const int n = count[label];
      std::printf("  %-40s %6d %12.3f %12.3f %7.1f%%\n", label.c_str(), n, measured / n * 1e3, priced / n * 1e3, (priced / measured - 1) * 100);
    }
  }
  const std::string text = device_profile_json(p);
  if (o.out.empty()) std::printf("\n%s", text.c_str());
  else {
    write_file_atomically(o.out, [&](std::ostream& s) { s << text; });
    std::printf("\nwrote %s\n", o.out.string().c_str());
  }
}

}  // namespace

void add_bench_device_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-device",
                                 "Measure a device profile (mosaic.device/1) for the simulated clock: the engine's own steps and copies on "
                                 "this machine's CPU or GPU, fitted to the cost model");
  auto o = std::make_shared<Opts>();
  cmd->add_option("--device", o->device, "cpu or cuda")->default_val("cpu");
  cmd->add_option("--out", o->out, "write the profile here (default: print it)");
  cmd->add_option("--name", o->name, "the profile's name (default: the device's)");
  cmd->add_option("--dir", o->dir, "where the synthetic families are written (reused when present)")->default_val("bench-device-family");
  add_threads_option(cmd, o->threads, "CPU threads (0 = all cores)");
  cmd->add_option("--steps", o->steps, "timed decode steps per configuration")->default_val(24)->check(CLI::Range(2, 100000));
  add_count_option<std::int64_t>(cmd, "--hidden", o->hidden, "the larger model's hidden size (0: 1024 on CPU, 2048 on CUDA)", 0, 16384);
  add_count_option<std::int64_t>(cmd, "--intermediate", o->intermediate, "its expert intermediate size (0: 2048 on CPU, 5632 on CUDA)", 0, 65536);
  add_count_option<std::int64_t>(cmd, "--layers", o->layers, "its layers (0: 4 on CPU, 16 on CUDA)", 0, 256);
  add_count_option<std::int64_t>(cmd, "--prefill", o->prefill, "tokens of the compute-bound prefill (0: 256 on CPU, 4096 on CUDA)", 0, 65536);
  cmd->add_option("--like", o->like, "a config.json whose architecture the synthetic models take (default: Mixtral's)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--check", o->check, "checkpoint folders whose decode and prefill steps are also timed and priced with the fitted profile")
      ->check(CLI::ExistingDirectory);
  cmd->callback([o] { run_bench_device(*o); });
}

}  // namespace mosaic::cli
