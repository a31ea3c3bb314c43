// bench-forward: CPU prefill and decode throughput, against LibTorch's own matmul measured in the
// same run. Prefill is compared in GFLOP/s with a GEMM of the model's expert shape; decode, which
// reads every active weight once per token, in GB/s with a GEMV of the same shape. Then sampling:
// the host's cost per token on each model's own last-position logits (and on rows the size of Mixtral's
// and Qwen2's vocabularies), against sorting the whole row, measured in the same run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <random>
#include <thread>

#include "cli/bench_attention.h"
#include "cli/bench_forward_engine.h"
#include "cli/best_seconds.h"
#include "cli/commands.h"
#include "model/checkpoint.h"
#include "model/synthetic.h"
#include "runtime/forward.h"
#include "runtime/matmul_yardstick.h"
#include "runtime/sampler_reference.h"
#include "runtime/step_draws.h"
#include "runtime/token_candidates.h"
#include "runtime/threads.h"
#include "common/stopwatch.h"

namespace fs = std::filesystem;

namespace mosaic::cli {
namespace {

struct BenchRow {
  std::string name;
  std::int64_t params = 0, active = 0;
  double prefill_tps = 0, prefill_gflops = 0, decode_tps = 0, decode_gbs = 0;
  MatmulRate gemm, gemv;
  std::vector<float> logits;  // the prompt's last position
};

// Sampling settings a client sends, as the table's columns.
struct SamplingCase {
  const char* name;
  SamplingParams params;
};
const SamplingCase kSamplingCases[] = {{"greedy", {}},
                                       {"T 0.7", {.temperature = 0.7}},
                                       {"T 0.7 p 0.9", {.temperature = 0.7, .top_p = 0.9}},
                                       {"T 0.7 k 40", {.temperature = 0.7, .top_k = 40}}};

BenchRow bench_model(const std::string& name, const fs::path& dir, std::int64_t prompt, std::int64_t decode, int reps) {
  const Checkpoint ck(dir);
  const auto model = Model::load(ck);
  const ModelSpec& s = model->spec();
  BenchRow row;
  row.name = name;
  row.params = parameter_count(s);
  row.active = active_parameter_count(s);

  std::mt19937_64 rng(7);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(prompt));
  for (auto& id : ids) id = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(s.vocab_size));

  double best_prefill = 1e30, best_decode = 1e30;
  for (int r = 0; r < reps; ++r) {  // best of `reps`: the machine's noise only ever slows a run down
    KvCache cache(s, 1, prompt + decode);
    auto t0 = std::chrono::steady_clock::now();
    Logits last = forward(*model, cache, ids, LogitsFor::LastPosition);
    if (row.logits.empty()) row.logits = std::move(last.values);
    best_prefill = std::min(best_prefill, seconds_since(t0));
    t0 = std::chrono::steady_clock::now();
    for (std::int64_t i = 0; i < decode; ++i) {
      const std::int64_t next[] = {ids[static_cast<std::size_t>(i % prompt)]};
      forward(*model, cache, next, LogitsFor::LastPosition);
    }
    best_decode = std::min(best_decode, seconds_since(t0));
  }
  row.prefill_tps = static_cast<double>(prompt) / best_prefill;
  row.prefill_gflops = 2.0 * static_cast<double>(row.active) * row.prefill_tps / 1e9;
  row.decode_tps = static_cast<double>(decode) / best_decode;
  row.decode_gbs = 4.0 * static_cast<double>(row.active) * row.decode_tps / 1e9;  // fp32 weights
  // Yardsticks at this model's expert shape: tokens per expert ≈ prompt·top_k / experts.
  const std::int64_t m = std::max<std::int64_t>(1, prompt * s.top_k / std::max<std::int64_t>(1, s.num_experts));
  row.gemm = measure_matmul(m, s.hidden_size, 2 * s.expert_intermediate);
  row.gemv = measure_matmul(1, s.hidden_size, 2 * s.expert_intermediate);
  return row;
}

// Microseconds per call of `f`, the best of 5 rounds of `calls`.
template <class F>
double best_us(int calls, F&& f) {
  return best_seconds(5, [&] {
           for (int i = 0; i < calls; ++i) f();
         }) / calls * 1e6;
}

struct SamplingRow {
  std::string name;
  std::vector<float> logits;
};

void print_sampling(const std::vector<SamplingRow>& rows) {
  std::printf("\nHost sampling, us/token, best of 5: the Sampler (lazy prefix sort) | sorting the whole row | ratio\n");
  std::printf("%-32s %7s", "logits", "vocab");
  for (const SamplingCase& c : kSamplingCases) std::printf(" | %24s", c.name);
  std::printf("\n");
  for (const SamplingRow& r : rows) {
    const std::span<const float> row(r.logits);
    std::printf("%-32s %7zu", r.name.c_str(), row.size());
    for (const SamplingCase& c : kSamplingCases) {
      Sampler lazy(c.params);
      FullSortSampler full(c.params);
      volatile std::int64_t token = 0;
      const double a = best_us(20, [&] { token = lazy.next(row); }), b = best_us(5, [&] { token = full.next(row); });
      std::printf(" | %7.1f %8.1f %6.1fx", a, b, b / a);
    }
    std::printf("\n");
  }
}

// What is left on the host when a device prepares the draw (kernels/token_candidates.h, the CUDA
// backend's 512 candidates): the Sampler finishing from them, and the share of draws that reached
// past them and fetched the whole row (here a copy; on the GPU a copy back).
void print_prepared(const std::vector<SamplingRow>& rows) {
  constexpr int kCandidates = 512;
  std::printf("\nHost part of a draw prepared on a device (%d candidates), us/token, mean of 2000 | draws that fetched the whole row\n", kCandidates);
  std::printf("%-32s %7s", "logits", "vocab");
  for (const SamplingCase& c : kSamplingCases) std::printf(" | %24s", c.name);
  std::printf("\n");
  for (const SamplingRow& r : rows) {
    std::printf("%-32s %7zu", r.name.c_str(), r.logits.size());
    for (const SamplingCase& c : kSamplingCases) {
      TokenCandidates prepared = prepare_candidates(r.logits, c.params.temperature, kCandidates);
      int fetched = 0, draws = 0;
      prepared.row = [&, whole = std::move(prepared.row)] {
        ++fetched;
        return whole();
      };
      // The mean over many draws, not the best of a few: a draw that fetches the row is rare and dear.
      Sampler sampler(c.params);
      volatile std::int64_t token = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (; draws < 2000; ++draws) token = sampler.next(prepared);
      static_cast<void>(token);  // the volatile store is the point: the draws are not optimized away
      const double us = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / draws * 1e6;
      std::printf(" | %15.1f %7.1f%%", us, 100.0 * fetched / draws);
    }
    std::printf("\n");
  }
}

// A decode step's draws for 64 sequences on one row each: one thread against the engine's `threads`.
void print_step_draws(const SamplingRow& row, unsigned threads) {
  std::printf("\nA step's draws, 64 sequences on %s, ms/step, best of 5: one thread | %u threads | ratio\n", row.name.c_str(),
              threads);
  for (const SamplingCase& c : kSamplingCases) {
    auto draws_on = [&](unsigned threads, std::size_t threaded_from) {
      std::vector<Sampler> samplers(64, Sampler(c.params));
      std::vector<TokenDraw> draws;
      for (Sampler& s : samplers) draws.push_back({&s, row.logits});
      return best_us(3, [&] { draw_tokens(draws, threads, threaded_from); }) / 1e3;
    };
    const double one = draws_on(1, SIZE_MAX), many = draws_on(threads, kThreadedDrawsFrom);
    std::printf("%-24s %9.2f %9.2f %6.1fx\n", c.name, one, many, one / many);
  }
}

}  // namespace

void add_bench_forward_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-forward", "CPU prefill/decode tokens/s against LibTorch's matmul, and host sampling against a full sort, same run");
  struct Opts { std::vector<fs::path> models; fs::path engine; bool synthetic = true, attention = false; std::int64_t prompt = 128, decode = 32; int reps = 3, threads = 0; };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->models, "checkpoint folders to measure (repeatable)");
  cmd->add_flag("--synthetic,!--no-synthetic", o->synthetic, "also measure a ~50M-parameter Mixtral-architecture model")->default_val(true);
  add_count_option<std::int64_t>(cmd, "--prompt", o->prompt, "prompt tokens for prefill", 1, 1 << 16);
  add_count_option<std::int64_t>(cmd, "--decode", o->decode, "tokens to decode one at a time", 1, 1 << 16);
  add_count_option(cmd, "--reps", o->reps, "repetitions; the best is reported", 1, 1000);
  add_threads_option(cmd, o->threads, "CPU threads (0 = all cores)");
  cmd->add_option("--engine", o->engine,
                  "also decode through the engine's CPU backend (batch 1, 4, 16; prefill 128, 512; batches mixed over two variants) a ~0.6B-parameter synthetic Mixtral "
                  "written here in bf16 and fp32 where absent (6.2 GB with the two variants), weights held as stored and widened, against the floor of the "
                  "bytes a step reads");
  cmd->add_flag("--attention", o->attention,
                "only one layer's decode attention at long contexts (Mixtral's and DeepSeek-V2-Lite's shapes, batch 1–16, context 512–8192): "
                "the CPU backend's kernel against LibTorch's batched path and the floor of the KV bytes read");
  cmd->callback([o] {
    const int threads = configure_threads(o->threads);
    if (o->attention) {
      bench_decode_attention(o->reps);
      return;
    }
    if (!o->engine.empty()) bench_engine_decode(o->engine, o->decode, o->reps, threads);
    std::vector<BenchRow> rows;
    for (const auto& m : o->models) rows.push_back(bench_model(m.parent_path().filename().string() + "/" + m.filename().string(), m, o->prompt, o->decode, o->reps));
    if (o->synthetic) {
      // ~50M parameters: hidden 384, 8 experts of width 768, 6 layers, vocab 8000.
      const fs::path dir = fs::temp_directory_path() / ("mosaic-bench-" + std::to_string(std::random_device{}()));
      write_synthetic_checkpoint(dir, mixtral_like_spec(8000, 384, 768, 6, 8), DType::BF16, 1);
      try {
        rows.push_back(bench_model("synthetic-mixtral-50M", dir, o->prompt, o->decode, o->reps));
      } catch (...) {
        fs::remove_all(dir);
        throw;
      }
      fs::remove_all(dir);
    }
    std::printf("CPU forward, fp32 compute, %d threads, prompt %lld, decode %lld, best of %d\n", threads,
                static_cast<long long>(o->prompt), static_cast<long long>(o->decode), o->reps);
    std::printf("%-24s %10s %10s | %12s %9s %11s %9s | %11s %8s %10s %9s\n", "model", "params", "active",
                "prefill tok/s", "GFLOP/s", "GEMM GF/s", "vs GEMM", "decode tok/s", "GB/s", "GEMV GB/s", "vs GEMV");
    for (const BenchRow& r : rows)
      std::printf("%-24s %10lld %10lld | %12.0f %9.2f %11.2f %8.0f%% | %11.1f %8.2f %10.2f %8.0f%%\n", r.name.c_str(),
                  static_cast<long long>(r.params), static_cast<long long>(r.active), r.prefill_tps, r.prefill_gflops,
                  r.gemm.gflops, 100.0 * r.prefill_gflops / r.gemm.gflops, r.decode_tps, r.decode_gbs,
                  r.gemv.gbytes_per_s, 100.0 * r.decode_gbs / r.gemv.gbytes_per_s);
    std::vector<SamplingRow> sampling;
    for (BenchRow& r : rows) sampling.push_back({r.name, std::move(r.logits)});
    // Real vocabularies are larger than these models': rows of Mixtral's and Qwen2's size, N(0, 2)
    // logits with one token 8 above (a confident next token among a plausible crowd).
    std::mt19937 gen(3);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (std::size_t vocab : {32000, 151936}) {
      SamplingRow& r = sampling.emplace_back(SamplingRow{"N(0,2), one 8 above, " + std::to_string(vocab / 1000) + "k", {}});
      for (std::size_t i = 0; i < vocab; ++i) r.logits.push_back(normal(gen));
      r.logits[vocab / 3] = *std::max_element(r.logits.begin(), r.logits.end()) + 8.0f;
    }
    // A trained model's tail, roughly: the i-th most probable token at probability ∝ i^−1.1, the
    // ranks shuffled over the vocabulary.
    SamplingRow& zipf = sampling.emplace_back(SamplingRow{"Zipf 1.1, 32k", {}});
    for (std::size_t i = 0; i < 32000; ++i) zipf.logits.push_back(-1.1f * std::log(static_cast<float>(i + 1)));
    std::shuffle(zipf.logits.begin(), zipf.logits.end(), gen);
    print_sampling(sampling);
    print_prepared(sampling);
    print_step_draws(sampling[sampling.size() - 3], static_cast<unsigned>(threads));
  });
}

}  // namespace mosaic::cli
