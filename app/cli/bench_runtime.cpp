// bench-runtime: what the multi-variant runtime costs on the CPU backend, each number against a
// baseline measured in the same run — decode with every expert resident against the plain forward
// pass, and one non-expert swap and one expert miss against their bytes ÷ memcpy bandwidth.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include "analysis/layout.h"
#include "cli/commands.h"
#include "model/synthetic.h"
#include "runtime/runtime.h"
#include "runtime/threads.h"

namespace fs = std::filesystem;

namespace mosaic::cli {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Seconds of `decode` single-token steps after a `prompt`-token prefill, best of `reps`.
template <class Step>
double decode_seconds(const ModelSpec& s, std::int64_t prompt, std::int64_t decode, int reps, Step&& step) {
  std::mt19937_64 rng(7);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(prompt));
  for (auto& id : ids) id = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(s.vocab_size));
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    KvCache cache(s, 1, prompt + decode);
    step(cache, std::span<const std::int64_t>(ids));
    const auto t0 = Clock::now();
    for (std::int64_t i = 0; i < decode; ++i) step(cache, std::span<const std::int64_t>(&ids[static_cast<std::size_t>(i % prompt)], 1));
    best = std::min(best, since(t0));
  }
  return best;
}

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
    best = std::min(best, since(t0) / static_cast<double>(n));
  }
  return static_cast<double>(bytes) / best / 1e9;
}

Layout uniform_layout(const HostStore& store, int variant_or_none) {
  Layout l;
  for (int v = 0; v < store.variants(); ++v) l.variants.push_back({store.name(v), "", ""});
  l.plan.layers = store.spec().num_layers;
  l.plan.experts = store.spec().num_experts;
  l.plan.variants = store.variants();
  l.plan.map.assign(static_cast<std::size_t>(l.plan.layers * l.plan.experts), variant_or_none);
  l.plan.capacity = variant_or_none < 0 ? 0 : static_cast<std::int64_t>(l.plan.map.size());
  return l;
}

}  // namespace

void add_bench_runtime_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-runtime", "Runtime overhead, swap and miss cost against memcpy, same run");
  struct Opts { std::int64_t prompt = 128, decode = 32; int reps = 3, threads = 0; };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--prompt", o->prompt, "prompt tokens")->default_val(128);
  cmd->add_option("--decode", o->decode, "decode steps")->default_val(32);
  cmd->add_option("--reps", o->reps, "repetitions; the best is reported")->default_val(3);
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all cores)")->default_val(0);
  cmd->callback([o] {
    const int threads = configure_threads(o->threads);
    // Two variants of the ~50M-parameter synthetic Mixtral that bench-forward measures.
    const fs::path dir = fs::temp_directory_path() / ("mosaic-bench-" + std::to_string(std::random_device{}()));
    struct Cleanup { fs::path d; ~Cleanup() { std::error_code ec; fs::remove_all(d, ec); } } cleanup{dir};
    const ModelSpec spec = mixtral_like_spec(8000, 384, 768, 6, 8);
    Family family;
    for (int v = 0; v < 2; ++v) {
      write_synthetic_checkpoint(dir / ("v" + std::to_string(v)), spec, DType::BF16, 1 + static_cast<std::uint64_t>(v));
      family.add("v" + std::to_string(v), dir / ("v" + std::to_string(v)));
    }
    const HostStore store(family);
    const std::vector<int> to_store{0, 1};

    // Decode: the plain forward pass against the runtime with every expert of v0 resident, taken
    // in turns so that the machine's drift affects both alike.
    const Model& plain = store.model(0);
    Runtime resident(store, uniform_layout(store, 0), to_store);
    RuntimeCounters rc = resident.new_counters();
    double t_plain = 1e30, t_resident = 1e30;
    for (int r = 0; r < o->reps; ++r) {
      t_plain = std::min(t_plain, decode_seconds(spec, o->prompt, o->decode, 1, [&](KvCache& c, std::span<const std::int64_t> ids) {
        forward(plain, c, ids, LogitsFor::LastPosition);
      }));
      t_resident = std::min(t_resident, decode_seconds(spec, o->prompt, o->decode, 1, [&](KvCache& c, std::span<const std::int64_t> ids) {
        resident.forward(0, c, ids, LogitsFor::LastPosition, rc);
      }));
    }

    // Swaps: alternate the resident variant; the fastest of 20.
    double swap_s = 1e30;
    for (int i = 0; i < 20; ++i) {
      RuntimeCounters sc = resident.new_counters();
      resident.reconfigure(i % 2 ? 0 : 1, sc);
      swap_s = std::min(swap_s, sc.swap_seconds);
    }

    // Misses: nothing resident, transient loads for every routed expert.
    Runtime empty(store, uniform_layout(store, -1), to_store);
    RuntimeCounters mc = empty.new_counters();
    const double t_miss = decode_seconds(spec, o->prompt, o->decode, 1, [&](KvCache& c, std::span<const std::int64_t> ids) {
      empty.forward(0, c, ids, LogitsFor::LastPosition, mc);
    });
    const LayerCounts m = mc.total();
    const double load_s = m.load_seconds / static_cast<double>(m.loads);

    const double bw_swap = memcpy_gbs(store.non_expert_bytes()), bw_expert = memcpy_gbs(store.expert_bytes());
    const double tok_plain = static_cast<double>(o->decode) / t_plain, tok_resident = static_cast<double>(o->decode) / t_resident;
    std::printf("multi-variant runtime, CPU backend, %d threads, synthetic Mixtral 50M ×2 (fp32 on the device), "
                "prompt %lld, decode %lld, best of %d\n", threads, static_cast<long long>(o->prompt),
                static_cast<long long>(o->decode), o->reps);
    std::printf("%-34s %14s %14s %10s\n", "measurement", "value", "baseline", "ratio");
    std::printf("%-34s %10.1f tok/s %10.1f tok/s %9.3f  (overhead %+.1f%%)\n", "decode, all experts resident", tok_resident,
                tok_plain, tok_resident / tok_plain, 100.0 * (tok_plain / tok_resident - 1.0));
    std::printf("%-34s %11.3f ms %11.3f ms %9.2f  (%.1f MiB, memcpy %.1f GB/s)\n", "one non-expert swap", swap_s * 1e3,
                static_cast<double>(store.non_expert_bytes()) / bw_swap / 1e6, swap_s / (static_cast<double>(store.non_expert_bytes()) / bw_swap / 1e9),
                store.non_expert_bytes() / 0x1p20, bw_swap);
    std::printf("%-34s %11.3f ms %11.3f ms %9.2f  (%.2f MiB, memcpy %.1f GB/s)\n", "one expert miss (load)", load_s * 1e3,
                static_cast<double>(store.expert_bytes()) / bw_expert / 1e6, load_s / (static_cast<double>(store.expert_bytes()) / bw_expert / 1e9),
                store.expert_bytes() / 0x1p20, bw_expert);
    std::printf("%-34s %10.1f tok/s %10.1f tok/s %9.3f  (%lld loads)\n", "decode, every expert a miss",
                static_cast<double>(o->decode) / t_miss, tok_plain, t_plain / t_miss, static_cast<long long>(m.loads));
  });
}

}  // namespace mosaic::cli
