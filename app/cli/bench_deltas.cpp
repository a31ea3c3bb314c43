// bench-deltas: DeltaMoE's serving claim (issue 61 #6; the paper: 2.57× the throughput of full
// variants). A synthetic Mixtral family of a base and N variants, each variant served as a delta
// folder over the base and as the full checkpoint it came from, at batch 1 (one request at a time)
// and batched: requests/s and time per output token, against the full variants with every expert
// resident and with only the deltas' device bytes (where the deltas keep every variant's experts
// resident and the full variants miss). On the CPU backend or on CUDA. Weights are random, so the
// deltas are as large as deltas get: times, not quality.
#include "cli/bench_deltas.h"

#include <cstdio>
#include <random>

#include "analysis/delta_folder.h"
#include "cli/batch_serve.h"
#include "cli/commands.h"
#include "cli/output_paths.h"
#include "cli/serving_args.h"
#include "common/atomic_file.h"
#include "common/stopwatch.h"
#include "model/synthetic.h"
#include "model/variant_folders.h"
#include "runtime/threads.h"

namespace fs = std::filesystem;

namespace mosaic::cli {

nlohmann::ordered_json deltas_against_variants(const fs::path& dir, const fs::path& base, const std::vector<fs::path>& variants, const DeltaServing& how) {
  const auto t_pack = std::chrono::steady_clock::now();
  std::vector<fs::path> deltas;
  const Checkpoint b(base);
  for (std::size_t i = 0; i < variants.size(); ++i) {
    deltas.push_back(dir / ("delta" + std::to_string(i)));
    write_delta(b, Checkpoint(variants[i]), DeltaFormat{4, true, 128}, deltas.back());
  }
  std::printf("%zu delta folders written in %.1f s\n", deltas.size(), seconds_since(t_pack));
  Family packed, full;
  open_family(packed, deltas);
  open_family(full, variants);
  const HostStore packed_store(packed), full_store(full);
  const ModelSpec& s = b.spec();
  RuntimeConfig with_deltas{.hit = HitPolicy::Strict, .resident_sets = static_cast<int>(variants.size()), .device = how.device};
  RuntimeConfig all_full = with_deltas;
  with_deltas.pinned = every_position(s, packed_store.index(base.filename().string()));
  std::vector<int> folders;
  for (const fs::path& d : deltas) folders.push_back(packed_store.index(d.filename().string()));
  with_deltas.pinned_if_room = deltas_layer_major(packed_store, folders);
  for (const PinnedExpert& p : every_position(s, 0))  // the full variants' experts, in the same order
    for (int t = 0; t < static_cast<int>(variants.size()); ++t) all_full.pinned_if_room.push_back({p.layer, p.expert, t});
  RuntimeConfig squeezed = all_full;
  squeezed.miss = "lru";
  const auto delta_rt = std::make_shared<Runtime>(packed_store, with_deltas);
  squeezed.budget_bytes = device_bytes(*delta_rt);
  struct Setup {
    const char* name;
    std::shared_ptr<Runtime> rt;
    const std::vector<fs::path>* targets;
  };
  const std::vector<Setup> setups{{"delta folders, all resident", delta_rt, &deltas},
                                  {"full variants, all resident", std::make_shared<Runtime>(full_store, all_full), &variants},
                                  {"full variants, the deltas' bytes", std::make_shared<Runtime>(full_store, squeezed), &variants}};

  std::printf("\n%zu variants over one base\n  %-44s %10s %5s %8s %9s %9s %8s\n", variants.size(), "batch, setup", "device MiB", "sets", "misses",
              "ms/token", "tok/s", "req/s");
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const int batch : how.batches) {
    // Batch 1: one request a variant, one at a time; else `batch` requests over the variants in turn.
    const std::size_t requests = batch == 1 ? variants.size() : static_cast<std::size_t>(batch);
    std::vector<Batch> best(setups.size(), Batch{.seconds = 1e30});
    for (int r = 0; r < how.reps; ++r)
      for (std::size_t x = 0; x < setups.size(); ++x) {
        std::vector<std::string> targets;
        for (std::size_t i = 0; i < requests; ++i) targets.push_back((*setups[x].targets)[i % variants.size()].filename().string());
        if (const Batch got = serve(setups[x].rt, targets, how.prompt, how.decode, batch); got.seconds < best[x].seconds) best[x] = got;
      }
    for (std::size_t x = 0; x < setups.size(); ++x) {
      const Batch& got = best[x];
      const double tps = static_cast<double>(got.tokens) / got.seconds, rps = static_cast<double>(got.requests) / got.seconds;
      int sets = 0;
      for (const DeviceItem& item : setups[x].rt->device_items()) sets += item.name.starts_with("non-expert weights");
      const std::string name = "batch " + std::to_string(batch) + ", " + setups[x].name;
      std::printf("  %-44s %10.1f %5d %8lld %9.2f %9.1f %8.2f\n", name.c_str(), device_bytes(*setups[x].rt) / 0x1p20, sets,
                  static_cast<long long>(got.misses), got.tpot * 1e3, tps, rps);
      rows.push_back({{"batch", batch}, {"setup", setups[x].name}, {"requests", got.requests}, {"device_bytes", device_bytes(*setups[x].rt)}, {"resident_sets", sets},
                      {"misses", got.misses}, {"tpot_s", got.tpot}, {"tokens_per_s", tps}, {"requests_per_s", rps}});
    }
    std::printf("  batch %d: delta folders ÷ full variants at the deltas' bytes: %.2f× the requests/s (DeltaMoE: 2.57×); ÷ all resident: %.2f×\n",
                batch, best[2].seconds / best[0].seconds, best[1].seconds / best[0].seconds);
  }
  return rows;
}

void add_bench_deltas_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-deltas", "DeltaMoE's serving claim: a family as delta folders over its base against the same "
                                                 "variants in full under the deltas' device bytes, at batch 1 and batched, same run");
  struct Opts {
    std::string device = "cpu";
    std::int64_t hidden = 384, inter = 768, layers = 6, experts = 8, vocab = 8000, prompt = 16, decode = 32;
    int variants = 4, reps = 2, threads = 0;
    std::vector<int> batches{1, 32};
    fs::path dir, json;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--device", o->device, "cpu or cuda")->default_val("cpu");
  add_count_option<std::int64_t>(cmd, "--hidden", o->hidden, "hidden size (default: bench-runtime's ~50M family)", 64, 16384);
  add_count_option<std::int64_t>(cmd, "--intermediate", o->inter, "expert intermediate size", 64, 65536);
  add_count_option<std::int64_t>(cmd, "--layers", o->layers, "layers", 1, 256);
  add_count_option<std::int64_t>(cmd, "--experts", o->experts, "experts a layer (top 2)", 2, 256);
  add_count_option<std::int64_t>(cmd, "--vocab", o->vocab, "vocabulary", 16, 1 << 20);
  add_count_option(cmd, "--variants", o->variants, "fine-tuned variants over the base", 1, 64);
  cmd->add_option("--batches", o->batches, "sequences a step (1: one request at a time)")->default_str("1 32")->check(CLI::Range(1, 1024));
  add_count_option<std::int64_t>(cmd, "--prompt", o->prompt, "prompt tokens a request", 1, 4096);
  add_count_option<std::int64_t>(cmd, "--decode", o->decode, "tokens generated a request", 1, 4096);
  add_count_option(cmd, "--reps", o->reps, "repetitions of each measurement, taken in turns; the best is reported", 1, 1000);
  add_threads_option(cmd, o->threads);
  cmd->add_option("--dir", o->dir, "where the base and variants are written (reused when present); default: a temporary folder, removed");
  cmd->add_option("--json", o->json, "also write the numbers here");
  cmd->callback([o] {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines as they come, also into a file
    const Device device = checked_device(o->device);
    const int threads = configure_threads(o->threads);
    check_output(o->json, "--json", {});
    if (!o->dir.empty()) check_output(o->dir, "--dir", {}, OutputKind::Folder);
    // The checkpoints where asked (kept), the deltas always in a folder of this run's own (removed).
    const fs::path scratch = fs::temp_directory_path() / ("mosaic-bench-deltas-" + std::to_string(std::random_device{}()));
    struct Cleanup {
      fs::path d;
      ~Cleanup() {
        std::error_code ec;
        fs::remove_all(d, ec);
      }
    } cleanup{scratch};
    const fs::path family_dir = o->dir.empty() ? scratch / "family" : o->dir;
    const ModelSpec spec = mixtral_like_spec(o->vocab, o->hidden, o->inter, o->layers, o->experts);
    const auto t_write = std::chrono::steady_clock::now();
    std::vector<fs::path> variants;
    for (int v = 0; v <= o->variants; ++v) {
      const fs::path d = family_dir / (v == 0 ? std::string("base") : "variant-" + std::to_string(v));
      if (!fs::exists(d / "model.safetensors")) write_synthetic_checkpoint(d, spec, DType::BF16, 300 + static_cast<std::uint64_t>(v));
      if (v > 0) variants.push_back(d);
    }
    std::printf("device %s, %d threads; base and %d variants of %.2f B parameters, written or found in %.1f s\n", o->device.c_str(), threads,
                o->variants, static_cast<double>(parameter_count(spec)) / 1e9, seconds_since(t_write));
    fs::create_directories(scratch);
    const nlohmann::ordered_json rows = deltas_against_variants(
        scratch, family_dir / "base", variants, {.device = device, .batches = o->batches, .reps = o->reps, .prompt = o->prompt, .decode = o->decode});
    const nlohmann::ordered_json out{{"device", o->device}, {"parameters", parameter_count(spec)}, {"variants", o->variants},
                                     {"prompt", o->prompt}, {"decode", o->decode}, {"rows", rows}};
    if (!o->json.empty()) write_file_atomically(o->json, [&](std::ostream& f) { f << out.dump(2) << "\n"; });
  });
}

}  // namespace mosaic::cli
