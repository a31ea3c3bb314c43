// bench-runtime: what the engine does with several variants on the CPU backend, each number against
// a baseline measured in the same run, on a synthetic ~50M-parameter Mixtral family:
//  - decode throughput with 1, 4, 16 and 32 concurrent sequences mixed over 4 full variants,
//    continuous batching against one request at a time (the same engine, max_sequences = 1);
//  - time per output token of a batch mixed over 4 and 8 ESFT adapters against the same batch of
//    base-only requests (ExpertWeave's measurement);
//  - SwapMoE's virtual experts (half the experts resident, sets updated with the traffic) against the
//    same set held still: what measuring importance and updating costs a batch's decode;
//  - Multi-MoE's Table 1: a one-MoE-layer model's attention and expert block in a decode step, by how
//    many of the token's top-2 experts were resident (0, 1, 2), against every expert resident;
//  - host memory of a base and 4 adapters against 5 merged models;
//  - one non-expert swap and one expert miss against their bytes ÷ memcpy bandwidth.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>

#include "cli/batch_serve.h"
#include "cli/bench_deltas.h"
#include "cli/commands.h"
#include "cli/output_paths.h"
#include "common/atomic_file.h"
#include "model/esft_adapter.h"
#include "model/safetensors.h"
#include "analysis/delta_folder.h"
#include "model/synthetic.h"
#include "model/variant_folders.h"
#include "runtime/engine.h"
#include "runtime/threads.h"
#include "common/stopwatch.h"

namespace fs = std::filesystem;

namespace mosaic::cli {
namespace {

using Clock = std::chrono::steady_clock;

// memcpy GB/s of `bytes` at a time from sources that are not in cache (a rotation through ≥ 128 MiB,
// past the L3), as the runtime's copies from a host store of hundreds of MiB are. Best of 5 rounds.
double memcpy_gbs(std::uint64_t bytes) {
  const std::size_t n = static_cast<std::size_t>(std::max<std::uint64_t>(2, (128ull << 20) / bytes));
  std::vector<std::vector<char>> from(n, std::vector<char>(bytes, 1));
  std::vector<char> to(bytes, 2);
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = Clock::now();
    for (const auto& f : from) std::memcpy(to.data(), f.data(), bytes);
    best = std::min(best, seconds_since(t0) / static_cast<double>(n));
  }
  return static_cast<double>(bytes) / best / 1e9;
}

// An ESFT adapter of `base`: `per_layer` experts of each layer taken from `donor` (a checkpoint of
// the same spec), saved as expert_cfg.json + the tuned experts only.
void write_adapter(const fs::path& dir, const fs::path& base, const Checkpoint& donor, int per_layer, std::uint64_t seed) {
  const ModelSpec& s = donor.spec();
  fs::create_directories(dir);
  std::mt19937_64 rng(seed);
  EsftAdapterConfig cfg;
  cfg.base_model = fs::relative(base, dir);
  std::vector<TensorBytes> tensors;
  const WeightNames names(s);
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    std::vector<std::int64_t> ids(static_cast<std::size_t>(s.num_experts));
    for (std::int64_t e = 0; e < s.num_experts; ++e) ids[static_cast<std::size_t>(e)] = e;
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(static_cast<std::size_t>(per_layer));
    std::sort(ids.begin(), ids.end());
    cfg.experts[l] = ids;
    for (std::int64_t e : ids)
      for (ExpertRole r : {ExpertRole::Gate, ExpertRole::Up, ExpertRole::Down}) {
        const Weight& w = donor.weight(names.expert(l, e, r));
        tensors.push_back({w.expected.name, w.dtype, w.info->shape, w.data()});
      }
  }
  write_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
  fs::copy_file(base / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  write_expert_cfg(dir / kExpertCfgFile, cfg);
}

}  // namespace

void add_bench_runtime_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-runtime",
                                 "Continuous batching against one request at a time, ESFT adapters against base-only batches, delta "
                                 "folders against full variants, host memory, swap and miss cost against memcpy; one run, synthetic "
                                 "~50M family");
  struct Opts {
    std::int64_t prompt = 16, decode = 32;
    int reps = 2, threads = 0;
    std::vector<int> concurrency{1, 4, 16, 32};
    std::vector<std::string> parts{"batching", "esft", "delta", "virtual", "hits", "memory", "copies"};
    fs::path json;
    fs::path write_family;
  };
  auto o = std::make_shared<Opts>();
  add_count_option<std::int64_t>(cmd, "--prompt", o->prompt, "prompt tokens per request", 1, 4096);
  add_count_option<std::int64_t>(cmd, "--decode", o->decode, "tokens generated per request", 1, 4096);
  add_count_option(cmd, "--reps", o->reps, "repetitions of each measurement; the best is reported", 1, 1000);
  add_threads_option(cmd, o->threads, "CPU threads (0 = all cores)");
  cmd->add_option("--json", o->json, "also write the measurements to this JSON file");
  cmd->add_option("--concurrency", o->concurrency, "concurrent sequences of the batching measurement")->default_str("1 4 16 32")->check(CLI::Range(1, 1024));
  cmd->add_option("--parts", o->parts, "which measurements: batching, esft, delta, virtual, hits, memory, copies")->default_str("all");
  cmd->add_option("--write-family", o->write_family,
                  "only write the ~50M family (4 bf16 variants in DIR/v0…v3 sharing half of each layer's experts "
                  "byte for byte) for sweeps of your own, and stop")->check(CLI::NonexistentPath);
  cmd->callback([o] {
    const int threads = configure_threads(o->threads);
    check_output(o->json, "--json", {});
    const fs::path dir = fs::temp_directory_path() / ("mosaic-bench-" + std::to_string(std::random_device{}()));
    struct Cleanup { fs::path d; ~Cleanup() { std::error_code ec; fs::remove_all(d, ec); } } cleanup{dir};
    const ModelSpec spec = mixtral_like_spec(8000, 384, 768, 6, 8);  // bench-forward's ~50M model
    if (!o->write_family.empty()) {
      write_synthetic_family(o->write_family, spec, DType::BF16, 4, [&](std::int64_t, std::int64_t e) { return e < spec.num_experts / 2; }, 11);
      std::cout << "wrote " << o->write_family.string() << "/v0 … v3 (" << parameter_count(spec) << " parameters each)\n";
      return;
    }
    nlohmann::ordered_json out = {{"threads", threads}, {"parameters", parameter_count(spec)},
                                  {"prompt", o->prompt}, {"decode", o->decode}};
    auto part = [&](const char* name) { return std::find(o->parts.begin(), o->parts.end(), name) != o->parts.end(); };
    // The best of `reps` of each of two measurements, taken in turns so that the machine's drift
    // touches both alike.
    auto best_of_both = [&](auto&& run_a, auto&& run_b) {
      Batch a = run_a(), b = run_b();
      for (int r = 1; r < o->reps; ++r) {
        const Batch a2 = run_a(), b2 = run_b();
        if (a2.seconds < a.seconds) a = a2;
        if (b2.seconds < b.seconds) b = b2;
      }
      return std::pair{a, b};
    };

    // 1. Four full variants, every non-expert set resident (K = 4) and every position pinned once
    //    (a consolidated layout at full capacity): continuous batching against one at a time.
    std::vector<fs::path> full;
    for (int v = 0; v < 4; ++v) {
      full.push_back(dir / ("v" + std::to_string(v)));
      write_synthetic_checkpoint(full.back(), spec, DType::BF16, 1 + static_cast<std::uint64_t>(v));
    }
    Family family;
    open_family(family, full);
    const HostStore store(family);
    RuntimeConfig mixed{.resident_sets = 4};
    for (std::int64_t l = 0; l < spec.num_layers; ++l)
      for (std::int64_t e = 0; e < spec.num_experts; ++e) mixed.pinned.push_back({l, e, static_cast<int>((l + e) % 4)});
    const auto rt = std::make_shared<Runtime>(store, mixed);
    std::printf("engine, CPU backend, %d threads, synthetic Mixtral %.1fM ×4 variants (bf16 stored, fp32 computed), prompt %lld, "
                "decode %lld, best of %d\n\n", threads, static_cast<double>(parameter_count(spec)) / 1e6,
                static_cast<long long>(o->prompt), static_cast<long long>(o->decode), o->reps);
    std::printf("%-12s %16s %16s %8s %8s\n", "concurrent", "batched tok/s", "one-at-a-time", "speedup", "steps");
    out["batching"] = nlohmann::ordered_json::array();
    for (int c : part("batching") ? o->concurrency : std::vector<int>{}) {
      std::vector<std::string> targets;
      for (int i = 0; i < c; ++i) targets.push_back(family.variants()[static_cast<std::size_t>(i % 4)].name);
      const auto [batched, serial] = best_of_both([&] { return serve(rt, targets, o->prompt, o->decode, 256); },
                                                  [&] { return serve(rt, targets, o->prompt, o->decode, 1); });
      const double tb = static_cast<double>(batched.tokens) / batched.seconds, ts = static_cast<double>(serial.tokens) / serial.seconds;
      std::printf("%-12d %16.1f %16.1f %7.2f× %8lld\n", c, tb, ts, tb / ts, static_cast<long long>(batched.steps));
      out["batching"].push_back({{"sequences", c}, {"batched_tokens_per_s", tb}, {"one_at_a_time_tokens_per_s", ts},
                                 {"speedup", tb / ts}, {"steps", batched.steps}});
    }

    // 2. ESFT adapters over one base: 2 experts of 8 tuned per layer, taken from another model.
    const fs::path base = full[0];
    const Checkpoint donor(full[1]);
    std::vector<fs::path> adapters;
    for (int a = 0; a < 8; ++a) {
      adapters.push_back(dir / ("esft" + std::to_string(a)));
      write_adapter(adapters.back(), base, donor, 2, 100 + static_cast<std::uint64_t>(a));
    }
    Family esft;
    open_family(esft, adapters);  // brings the base in
    const HostStore esft_store(esft);
    RuntimeConfig weave{.hit = HitPolicy::Strict};
    const int base_target = esft_store.index(base.filename().string());
    weave.pinned = every_position(spec, base_target);
    for (int t = 0; t < esft_store.targets(); ++t)
      for (const auto& [l, e] : esft_store.tuned(t)) weave.pinned.push_back({l, e, t});
    const auto weave_rt = std::make_shared<Runtime>(esft_store, weave);
    const int batch = 16;
    auto mix = [&](int n) {
      std::vector<std::string> t;
      for (int i = 0; i < batch; ++i) t.push_back(n == 0 ? esft_store.name(base_target) : "esft" + std::to_string(i % n));
      return t;
    };
    if (part("esft")) std::printf("\n%-34s %12s %12s %10s\n", "batch of 16, TPOT", "ms/token", "base-only", "overhead");
    out["esft"] = nlohmann::ordered_json::array();
    for (int n : part("esft") ? std::vector<int>{4, 8} : std::vector<int>{}) {
      const auto [b, base_only] = best_of_both([&] { return serve(weave_rt, mix(n), o->prompt, o->decode, 256); },
                                               [&] { return serve(weave_rt, mix(0), o->prompt, o->decode, 256); });
      std::printf("%-34s %12.2f %12.2f %+9.1f%%\n", ("mixed over " + std::to_string(n) + " ESFT adapters").c_str(), b.tpot * 1e3,
                  base_only.tpot * 1e3, 100.0 * (b.tpot / base_only.tpot - 1.0));
      out["esft"].push_back({{"adapters", n}, {"tpot_s", b.tpot}, {"base_only_tpot_s", base_only.tpot},
                             {"overhead", b.tpot / base_only.tpot - 1.0}});
    }

    // 3. DeltaMoE: 4 delta folders over the base, against the 4 full variants.
    if (part("delta")) {
      const fs::path fifth = dir / "v4";
      write_synthetic_checkpoint(fifth, spec, DType::BF16, 5);
      out["delta"] = deltas_against_variants(dir, full[0], {full[1], full[2], full[3], fifth},
                                             {.batches = {16}, .reps = o->reps, .prompt = o->prompt, .decode = o->decode});
    }

    // 4. Virtual experts: 4 of 8 experts per layer of v0 resident, a batch of 16 decoding, with the
    //    sets updated every 8 steps (importance measured every step, copies on the copy thread)
    //    against the same initial set held still (masked gating alone).
    if (part("virtual")) {
      Family one;
      open_family(one, {full[0]});
      const HostStore one_store(one);
      std::vector<PinnedExpert> half;
      for (std::int64_t l = 0; l < spec.num_layers; ++l)
        for (std::int64_t e = 0; e < 4; ++e) half.push_back({l, e, 0});
      const RuntimeConfig held{.pinned = half, .hit = HitPolicy::Strict, .miss = "masked"};
      RuntimeConfig moving = held, measuring = held;
      moving.virtual_experts = VirtualConfig{.update_every = 8, .staging = 1};
      measuring.virtual_experts = VirtualConfig{.staging = 0};  // importance measured, never acted on
      const auto held_rt = std::make_shared<Runtime>(one_store, held), moving_rt = std::make_shared<Runtime>(one_store, moving);
      const auto measuring_rt = std::make_shared<Runtime>(one_store, measuring);
      const std::vector<std::string> targets(static_cast<std::size_t>(batch), one_store.name(0));
      const auto [v, fixed_set] = best_of_both([&] { return serve(moving_rt, targets, o->prompt, o->decode, 256); },
                                               [&] { return serve(held_rt, targets, o->prompt, o->decode, 256); });
      const auto [m, fixed_again] = best_of_both([&] { return serve(measuring_rt, targets, o->prompt, o->decode, 256); },
                                                 [&] { return serve(held_rt, targets, o->prompt, o->decode, 256); });
      moving_rt->virtual_experts()->settle();
      const VirtualStats st = moving_rt->virtual_experts()->stats();
      const double copy = st.swapped ? st.copy_seconds / static_cast<double>(st.swapped) : 0.0;
      const double floor = static_cast<double>(one_store.expert_bytes()) / memcpy_gbs(one_store.expert_bytes()) / 1e9;
      std::printf("\n%-34s %12s %12s %10s\n", "batch of 16, 4 of 8 experts, TPOT", "ms/token", "set held", "overhead");
      std::printf("%-34s %12.2f %12.2f %+9.1f%%\n", "importance measured, no updates", m.tpot * 1e3, fixed_again.tpot * 1e3,
                  100.0 * (m.tpot / fixed_again.tpot - 1.0));
      std::printf("%-34s %12.2f %12.2f %+9.1f%%\n", "virtual experts, update every 8", v.tpot * 1e3, fixed_set.tpot * 1e3,
                  100.0 * (v.tpot / fixed_set.tpot - 1.0));
      std::printf("  over %d runs: %lld updates swapped in %lld experts (%.1f MiB), %.3f ms each (memcpy floor %.3f ms, %.2f×); "
                  "%lld steps began while copies were in flight\n",
                  o->reps, static_cast<long long>(st.updates), static_cast<long long>(st.swapped), static_cast<double>(st.bytes) / 0x1p20,
                  copy * 1e3, floor * 1e3, floor > 0 ? copy / floor : 0.0, static_cast<long long>(st.steps_overlapped));
      out["virtual"] = {{"tpot_s", v.tpot}, {"held_tpot_s", fixed_set.tpot}, {"overhead", v.tpot / fixed_set.tpot - 1.0},
                        {"importance_only_tpot_s", m.tpot}, {"importance_only_overhead", m.tpot / fixed_again.tpot - 1.0},
                        {"updates", st.updates}, {"swapped", st.swapped}, {"bytes", st.bytes}, {"copy_seconds_per_expert", copy},
                        {"memcpy_floor_s", floor}, {"steps_overlapped", st.steps_overlapped}};
    }

    // 5. Multi-MoE's Table 1: one MoE layer, half its experts pinned, a request decoding alone; the
    //    layer's attention and expert block as the engine times them (LayerCounts::alone), by how many
    //    of the token's top-2 experts were resident, against every expert pinned.
    if (part("hits")) {
      const ModelSpec one = mixtral_like_spec(spec.vocab_size, spec.hidden_size, spec.expert_intermediate, 1, spec.num_experts);
      write_synthetic_checkpoint(dir / "one-layer", one, DType::BF16, 9);
      Family single_layer;
      open_family(single_layer, {dir / "one-layer"});
      const HostStore one_store(single_layer);
      auto times_of = [&](const RuntimeConfig& config) {
        const auto rt = std::make_shared<Runtime>(one_store, config);
        std::vector<LayerTime> out(static_cast<std::size_t>(one.top_k) + 1);
        for (int rep = 0; rep < o->reps; ++rep) {
          Engine engine(rt, {.scheduler = {.max_sequences = 1}});
          std::vector<std::int64_t> prompt(8);
          for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<std::int64_t>(31 * i + 7 * rep) % one.vocab_size;
          const auto handle = engine.submit({one_store.name(0), {.prompt = prompt, .max_new_tokens = 256}});
          const RequestResult& r = handle->wait();
          for (const LayerCounts& c : r.stats.counters.layers) add_times(out, c.alone);
        }
        return out;
      };
      std::vector<PinnedExpert> half;
      for (std::int64_t e = 0; e < one.num_experts / 2; ++e) half.push_back({0, e, 0});
      const std::vector<LayerTime> mixed = times_of(RuntimeConfig{.pinned = half, .hit = HitPolicy::Strict});
      const LayerTime all = times_of(RuntimeConfig{.pinned = every_position(one, 0), .hit = HitPolicy::Strict}).back();
      auto per_step = [](double seconds, std::int64_t steps) { return steps ? seconds / static_cast<double>(steps) : 0.0; };
      const double all_experts = per_step(all.expert_seconds, all.steps);
      std::printf("\n%-34s %8s %14s %14s %12s\n", "one MoE layer, decode step", "steps", "attention ms", "experts ms", "vs all");
      out["hits"] = nlohmann::ordered_json::array();
      for (int h = 0; h <= one.top_k; ++h) {
        const LayerTime& t = mixed[static_cast<std::size_t>(h)];
        const double experts = per_step(t.expert_seconds, t.steps), attention = per_step(t.attention_seconds, t.steps);
        std::printf("%-34s %8lld %14.3f %14.3f %+11.1f%%\n", (std::to_string(h) + " of " + std::to_string(one.top_k) + " experts resident").c_str(),
                    static_cast<long long>(t.steps), attention * 1e3, experts * 1e3,
                    all_experts > 0 && t.steps ? 100.0 * (experts / all_experts - 1.0) : 0.0);
        out["hits"].push_back({{"hits", h}, {"steps", t.steps}, {"attention_s", attention}, {"experts_s", experts},
                               {"all_resident_experts_s", all_experts}});
      }
      std::printf("%-34s %8lld %14.3f %14.3f\n", "every expert resident", static_cast<long long>(all.steps),
                  per_step(all.attention_seconds, all.steps) * 1e3, all_experts * 1e3);
    }

    // 6. Host memory: a base and 4 adapters, against the 5 merged models they would otherwise be.
    auto write_json = [&] {
      if (!o->json.empty()) write_file_atomically(o->json, [&](std::ostream& f) { f << out.dump(1) << "\n"; });
    };
    if (!part("memory") && !part("copies")) return write_json();
    Family four;
    open_family(four, {adapters.begin(), adapters.begin() + 4});
    const HostStore four_store(four);
    const std::uint64_t merged = 5 * Checkpoint(base).total_bytes();
    std::printf("\n%-34s %9.1f MiB %9.1f MiB %9.2f×\n", "host store: base + 4 adapters", four_store.host_bytes() / 0x1p20,
                merged / 0x1p20, static_cast<double>(merged) / static_cast<double>(four_store.host_bytes()));
    out["host_bytes"] = {{"base_and_4_adapters", four_store.host_bytes()}, {"five_merged_models", merged}};

    // 7. One swap and one miss against memcpy of the same bytes (the copy converts bf16 to fp32).
    Family two;
    open_family(two, {full[0], full[1]});
    const HostStore two_store(two);
    const auto swapping = std::make_shared<Runtime>(two_store, RuntimeConfig{.pinned = every_position(spec, 0)});
    double swap_s = 1e30;
    {
      Engine engine(swapping, {.scheduler = {.max_sequences = 1}});
      for (int i = 0; i < 20; ++i) {
        const auto h = engine.submit({two_store.name(i % 2), {.prompt = {1, 2}, .max_new_tokens = 1}});
        const RequestResult& r = h->wait();
        if (r.stats.counters.swaps) swap_s = std::min(swap_s, r.stats.counters.swap_seconds);
      }
    }
    const auto missing = std::make_shared<Runtime>(two_store, RuntimeConfig{});
    const Batch misses = serve(missing, {two_store.name(0)}, o->prompt, o->decode, 1);
    RuntimeCounters mc;
    {
      Engine engine(missing);
      const auto h = engine.submit({two_store.name(0), {.prompt = std::vector<std::int64_t>(static_cast<std::size_t>(o->prompt), 3), .max_new_tokens = 8}});
      mc = h->wait().stats.counters;
    }
    const LayerCounts m = mc.total();
    const double load_s = m.load_seconds / static_cast<double>(std::max<std::int64_t>(1, m.loads));
    const double bw_swap = memcpy_gbs(two_store.non_expert_bytes()), bw_expert = memcpy_gbs(two_store.expert_bytes());
    const double floor_swap = static_cast<double>(two_store.non_expert_bytes()) / bw_swap / 1e9;
    const double floor_load = static_cast<double>(two_store.expert_bytes()) / bw_expert / 1e9;
    std::printf("%-34s %9.3f ms  %9.3f ms %9.2f×  (%.1f MiB stored, memcpy %.1f GB/s)\n", "one non-expert swap", swap_s * 1e3,
                floor_swap * 1e3, swap_s / floor_swap, two_store.non_expert_bytes() / 0x1p20, bw_swap);
    std::printf("%-34s %9.3f ms  %9.3f ms %9.2f×  (%.2f MiB stored, memcpy %.1f GB/s)\n", "one expert miss (load)", load_s * 1e3,
                floor_load * 1e3, load_s / floor_load, two_store.expert_bytes() / 0x1p20, bw_expert);
    std::printf("%-34s %9.1f tok/s (every routed expert loaded, one at a time)\n", "decode, nothing pinned",
                static_cast<double>(misses.tokens) / misses.seconds);
    out["swap"] = {{"seconds", swap_s}, {"memcpy_floor_s", floor_swap}, {"bytes", two_store.non_expert_bytes()}};
    out["miss"] = {{"seconds", load_s}, {"memcpy_floor_s", floor_load}, {"bytes", two_store.expert_bytes()}};
    write_json();
  });
}

}  // namespace mosaic::cli
