// bench-esft: ExpertWeave's own workload (issue 58 #11) on a synthetic family of a DeepSeek config's
// shapes — DeepSeek-V2-Lite's by default (27 layers, hidden 2048, 64 routed experts of 1408 and 2
// shared, top 6, latent attention of rank 512, the first layer dense, vocab 102400) — and N ESFT
// adapters over it in DeepSeek's released format, each tuning a share of every MoE layer's experts
// (ESFT tunes about 10 %). The base's experts and every adapter's tuned ones resident (the esft
// deployment: adapters share the base's non-expert set and are served by rerouting). On the device
// asked for:
//  - what N adapters over one base hold, host and device, against N merged models (issue 61 #8);
//  - decode time per token at batch 1 on the base, against bytes read per token ÷ the read rate
//    measured in the same run;
//  - the TPOT of a batch whose sequences are spread over 1, 2, 4 … N adapters, against the same
//    batch on the base alone (ExpertWeave reports +4–11 %);
//  - the KV bytes per token of the latent cache against full keys and values, and how many 4k-token
//    sequences fit in what the device has left once the weights are in.
// Weights are random: times, not quality. transformers' generate on the same shapes is
// docs/bench/transformers_deepseek_decode.py.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "cli/commands.h"
#include "cli/output_paths.h"
#include "cli/read_rate.h"
#include "cli/serving_args.h"
#include "cli/step_decoder.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "common/install_paths.h"
#include "common/stopwatch.h"
#include "model/esft_adapter.h"
#include "model/synthetic.h"
#include "model/variant_folders.h"
#include "runtime/cuda/cuda_probe.h"
#include "runtime/threads.h"

namespace fs = std::filesystem;

namespace mosaic::cli {
namespace {

struct EsftBench {
  fs::path config, dir, json;
  std::int64_t layers = 0;  // 0: the config's
  int threads = 0;
  int adapters = 8, steps = 32, batch = 8, repeats = 3;
  double tuned = 0.1;
  std::string device = "cpu";
  bool write_only = false;
};

// `count` experts of every MoE layer, drawn without repetition from `seed`.
EsftAdapterConfig drawn_experts(const ModelSpec& spec, std::int64_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  EsftAdapterConfig cfg;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(spec.num_experts));
  for (std::int64_t l = 0; l < spec.num_layers; ++l) {
    if (!spec.is_sparse(l)) continue;
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<std::int64_t> chosen(ids.begin(), ids.begin() + count);
    std::sort(chosen.begin(), chosen.end());
    cfg.experts[l] = std::move(chosen);
  }
  return cfg;
}

// Mean seconds of `steps` decode steps of one sequence per target.
double decode_seconds(Runtime& rt, const HostStore& store, const std::vector<int>& targets, int steps) {
  return StepDecoder(rt, store, targets, 16, 16 + steps + 8).mean_decode(steps);
}

void run(const EsftBench& o) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const Device device = checked_device(o.device);
  ModelSpec spec = load_model_spec(o.config);
  if (spec.num_experts == 0) throw InvalidArgument(o.config.string(), "n_routed_experts", "is 0: ESFT adapters tune routed experts", "give a MoE config");
  if (o.layers > 0) {
    if (o.layers > spec.num_layers)
      throw InvalidArgument("bench-esft", "--layers " + std::to_string(o.layers), "is more than the config's " + std::to_string(spec.num_layers));
    spec.num_layers = o.layers;
    spec.sparse_layers.resize(static_cast<std::size_t>(o.layers));
    spec.mtp_layers = 0;
  }
  if (spec.num_sparse_layers() == 0) throw InvalidArgument("bench-esft", "--layers " + std::to_string(o.layers), "leaves no MoE layer", "give more layers");
  const std::int64_t per_layer = std::clamp<std::int64_t>(std::llround(o.tuned * double(spec.num_experts)), 1, spec.num_experts);

  // The family: written where absent, the same every time for the same options.
  const auto t_write = std::chrono::steady_clock::now();
  const fs::path base = o.dir / "base";
  // A family already there is reused only if it is the one these options write: checked before
  // anything is added to it, so that other options cannot leave it half one model and half another.
  if (fs::exists(base / "model.safetensors"))
    if (const auto diff = first_difference(load_model_spec(base / "config.json"), spec))
      throw MismatchError((base / "config.json").string(), "", "holds a family of another model than --config and --layers ask for (" + *diff + ")",
                          "give another --dir, or delete it");
  for (int a = 0; a < o.adapters; ++a) {
    const fs::path cfg = o.dir / ("adapter-" + std::to_string(a)) / kExpertCfgFile;
    if (!fs::exists(cfg)) continue;
    std::size_t tuned = 0;
    for (const auto& [layer, ids] : read_expert_cfg(cfg, spec).experts) tuned += ids.size();
    if (static_cast<std::int64_t>(tuned) != per_layer * spec.num_sparse_layers())
      throw MismatchError(cfg.string(), "experts",
                          "tunes " + std::to_string(tuned) + " experts, where --tuned asks for " + std::to_string(per_layer) + " per MoE layer (" +
                              std::to_string(per_layer * spec.num_sparse_layers()) + ")",
                          "give another --dir, or delete it");
  }
  if (!fs::exists(base / "model.safetensors")) write_synthetic_checkpoint(base, spec, DType::BF16, 58);
  std::vector<fs::path> dirs{base};
  for (int a = 0; a < o.adapters; ++a) {
    const fs::path d = o.dir / ("adapter-" + std::to_string(a));
    if (!fs::exists(d / "model.safetensors")) write_synthetic_esft_adapter(d, spec, drawn_experts(spec, per_layer, 100 + a), DType::BF16, 200 + a);
    dirs.push_back(d);
  }
  Family family;
  open_family(family, dirs);
  const HostStore store(family);
  std::printf("family: %s, %lld layers (%lld MoE), base %.2f GB bf16 and %d adapters of %lld experts per MoE layer (%.2f GB each); %.0f s to write and read\n",
              std::string(spec.model_type()).c_str(), static_cast<long long>(spec.num_layers), static_cast<long long>(spec.num_sparse_layers()),
              double(store.non_expert_bytes() + spec.num_sparse_layers() * spec.num_experts * store.expert_bytes()) / 1e9, o.adapters,
              static_cast<long long>(per_layer), double(per_layer * spec.num_sparse_layers() * store.expert_bytes()) / 1e9, seconds_since(t_write));
  if (o.write_only) return;

  nlohmann::ordered_json out{{"model_type", std::string(spec.model_type())}, {"layers", spec.num_layers}, {"adapters", o.adapters},
                             {"tuned_per_layer", per_layer}, {"device", o.device}};
  // Bytes a decode token reads: every non-expert weight (shared experts among them) but the
  // embedding table (one row), and top_k routed experts per MoE layer; and the rate this device
  // reads at, measured now.
  const double embed_bytes = double(spec.vocab_size * spec.hidden_size) * 2;
  const double per_token = double(store.non_expert_bytes()) - embed_bytes + double(spec.top_k * spec.num_sparse_layers()) * double(store.expert_bytes());
  double read_rate = 0;
  if (device == Device::Cuda) {
    const cuda::DeviceRates rates = cuda::measure_rates();
    read_rate = rates.read_bytes_per_s;
    out["gpu"] = rates.name;
  } else {
    read_rate = read_gbs(std::size_t(1) << 30) * 1e9;
  }
  std::printf("read rate %.0f GB/s (measured now)\n", read_rate / 1e9);
  out["read_GBps"] = read_rate / 1e9;

  std::vector<PinnedExpert> pins;  // the base's experts, and each adapter's own (tuned) ones: the rest are the base's, rerouted
  for (int t = 0; t < store.targets(); ++t)
    for (std::int64_t l = 0; l < spec.num_layers; ++l)
      if (spec.is_sparse(l))
        for (std::int64_t e = 0; e < spec.num_experts; ++e)
          if (t == 0 || store.expert(t, l, e) != store.expert(0, l, e)) pins.push_back({l, e, t});
  Runtime rt(store, RuntimeConfig{.pinned = pins, .hit = HitPolicy::Strict, .device = device});
  rt.make_resident(std::vector<int>{store.set_of(0)});

  // What N adapters over one base hold against N merged models (issue 61 #8), in the store's own
  // bytes: the host holds each distinct tensor once; the device the base's set, its experts and
  // every adapter's own.
  const double model_bytes = double(store.non_expert_bytes()) + double(spec.num_sparse_layers() * spec.num_experts) * double(store.expert_bytes());
  const double merged = double(o.adapters) * model_bytes;
  std::printf("memory: %d adapters over one base hold %.2f GB on the host and %.2f GB of weights on the device, against %.2f GB for %d merged "
              "models (%.1f×)\n", o.adapters, double(store.host_bytes()) / 1e9, double(rt.weight_bytes()) / 1e9, merged / 1e9, o.adapters,
              merged / double(rt.weight_bytes()));
  out["memory"] = {{"host_bytes", store.host_bytes()}, {"device_weight_bytes", rt.weight_bytes()}, {"merged_models_bytes", merged}};

  const double floor = per_token / read_rate;
  const double one = decode_seconds(rt, store, {0}, o.steps);
  std::printf("\ndecode, batch 1, the base (%d steps): %.3f ms a token; floor %.3f ms (%.2f GB ÷ %.0f GB/s): %.2f× the floor\n", o.steps, one * 1e3,
              floor * 1e3, per_token / 1e9, read_rate / 1e9, one / floor);
  out["batch1"] = {{"tpot_ms", one * 1e3}, {"floor_ms", floor * 1e3}, {"bytes_per_token", per_token}};

  // A batch spread over the first m adapters (m = 0: the base alone), round robin.
  std::printf("\nbatch of %d sequences, TPOT by the adapters it spreads over (against the base alone; median of %d, rows interleaved)\n", o.batch,
              o.repeats);
  nlohmann::ordered_json mixed = nlohmann::json::array();
  std::vector<int> spreads{0};  // 0 (the base alone), 1, 2, 4, … and every adapter
  for (int m = 1; m < o.adapters; m *= 2) spreads.push_back(m);
  spreads.push_back(o.adapters);
  // Each repeat times every row in turn, so that a machine whose speed drifts (a shared VM) moves
  // all rows alike; each row's median is kept.
  std::vector<std::vector<double>> times(spreads.size());
  for (int r = 0; r < o.repeats; ++r)
    for (std::size_t i = 0; i < spreads.size(); ++i) {
      std::vector<int> targets;
      for (int q = 0; q < o.batch; ++q) targets.push_back(spreads[i] == 0 ? 0 : 1 + q % spreads[i]);
      times[i].push_back(decode_seconds(rt, store, targets, o.steps));
    }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  const double base_only = median(times[0]);
  for (std::size_t i = 0; i < spreads.size(); ++i) {
    const int m = spreads[i];
    const double tpot = median(times[i]);
    const auto [low, high] = std::minmax_element(times[i].begin(), times[i].end());
    std::printf("  %2d adapter%s  %8.3f ms   %+6.1f %%   (%d runs: %.3f–%.3f ms)\n", m, m == 1 ? " " : "s", tpot * 1e3, 100 * (tpot / base_only - 1),
                o.repeats, *low * 1e3, *high * 1e3);
    std::vector<double> runs_ms;
    for (double t : times[i]) runs_ms.push_back(t * 1e3);
    mixed.push_back({{"adapters", m}, {"tpot_ms", tpot * 1e3}, {"against_base", tpot / base_only}, {"runs_ms", runs_ms}});
  }
  out["mixed_batches"] = mixed;

  // The KV cache: a token's bytes on this device (bf16 on CUDA, fp32 on the CPU) against what full
  // keys and values of the same heads would take, and the 4k-token sequences that fit.
  const std::int64_t element = device == Device::Cuda ? 2 : 4;
  const double kv_token = double(spec.num_layers * spec.kv_cache_width() * element);
  const double full_token = spec.mla ? double(spec.num_layers * spec.num_heads * (spec.mla->nope_dim + spec.mla->rope_dim + spec.mla->v_dim) * element)
                                     : kv_token;
  nlohmann::ordered_json kv{{"bytes_per_token", kv_token}, {"full_kv_bytes_per_token", full_token}, {"element_bytes", element}};
  std::printf("\nKV cache: %.0f bytes a token (latent and rotary key, %s as the %s backend holds it), %.0f for full keys and values: %.1f× less\n",
              kv_token, element == 2 ? "bf16" : "fp32", device == Device::Cuda ? "CUDA" : "CPU", full_token, full_token / kv_token);
  if (device == Device::Cuda) {
    if (const auto memory = cuda::memory_bytes()) {
      const double weights = double(rt.weight_bytes());
      const double left = 0.9 * double(*memory) - weights;
      const double seq = 4096 * kv_token, full_seq = 4096 * full_token;
      std::printf("  4k-token sequences in the %.1f GB left of %.1f GB (90 %%) after %.1f GB of weights: %.0f, against %.0f with full keys and values\n",
                  left / 1e9, double(*memory) / 1e9, weights / 1e9, std::floor(left / seq), std::floor(left / full_seq));
      kv["sequences_4k"] = std::floor(left / seq);
      kv["sequences_4k_full_kv"] = std::floor(left / full_seq);
    }
  }
  out["kv"] = kv;
  if (!o.json.empty()) write_file_atomically(o.json, [&](std::ostream& s) { s << out.dump(2) << "\n"; });
}

}  // namespace

void add_bench_esft_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-esft", "ExpertWeave's workload on a synthetic DeepSeek family and N ESFT adapters in DeepSeek's format: "
                                               "batch-1 decode against its floor, TPOT of batches mixed over adapters, the latent KV cache");
  auto o = std::make_shared<EsftBench>();
  cmd->add_option("--config", o->config, "a DeepSeek config.json whose shapes the family takes (default: DeepSeek-V2-Lite's, shipped in sample_configs)");
  add_count_option<std::int64_t>(cmd, "--layers", o->layers, "the config's first layers only (0: all)", 0, 256);
  add_count_option(cmd, "--adapters", o->adapters, "ESFT adapters over the base", 1, 64);
  cmd->add_option("--tuned", o->tuned, "share of each MoE layer's experts an adapter tunes")->default_val(0.1)->check(CLI::Range(0.0, 1.0));
  add_count_option(cmd, "--steps", o->steps, "decode steps timed per row", 1, 100000);
  add_count_option(cmd, "--batch", o->batch, "sequences of the mixed batches", 1, 256);
  add_count_option(cmd, "--repeats", o->repeats, "times each mixed-batch row is timed, the rows in turn (the median kept)", 1, 100);
  cmd->add_option("--device", o->device, "cpu or cuda")->default_val("cpu");
  cmd->add_option("--dir", o->dir, "where the family is written (reused when present)")->default_val("bench-esft-family");
  cmd->add_option("--json", o->json, "also write the numbers here");
  cmd->add_flag("--write-only", o->write_only, "write the family (unless present) and stop");
  add_threads_option(cmd, o->threads, "CPU threads (0 = all cores)");
  cmd->callback([o] {
    if (o->config.empty()) o->config = shipped_data_dir() / "sample_configs/families/deepseek-v2-lite-esft/base/config.json";
    check_output(o->json, "--json", {});
    check_output(o->dir, "--dir", {}, OutputKind::Folder);
    configure_threads(o->threads);
    run(*o);
  });
}

}  // namespace mosaic::cli
