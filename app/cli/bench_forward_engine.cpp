// bench-forward --engine DIR: decode and prefill through the engine on the CPU backend (what chat,
// serve and every CPU sweep run), on a synthetic Mixtral of about 0.6 B parameters written in bf16
// and in fp32, with the CPU backend's weights held as stored (bf16 stays bf16) or widened to fp32.
// Each decode row stands against its floor, measured in the same run: the weight bytes a step reads ÷
// the read bandwidth, or where a batch's products cost more, their flops ÷ LibTorch's in-cache GEMM
// rate (bench-forward --attention's yardstick).
#include "cli/bench_forward_engine.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <vector>

#include "cli/best_seconds.h"
#include "cli/read_rate.h"
#include "common/byte_size.h"
#include "model/synthetic.h"
#include "model/variant_folders.h"
#include "runtime/engine.h"
#include "runtime/host_store.h"
#include "runtime/matmul_yardstick.h"
#include "runtime/threads.h"

namespace fs = std::filesystem;

namespace mosaic::cli {
namespace {

// What this process holds in RAM now (file pages mapped and touched included).
std::uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

struct EngineRow {
  std::string name;
  double bytes_per_param = 0;  // as the backend holds the weights
  std::uint64_t rss = 0;       // resident after serving, less before opening
  std::vector<double> step_ms;  // [batches]: decode ms per step
  std::vector<double> prefill_tps;  // [prompts]
};

// Distinct experts a decode step of `batch` sequences reads per layer, each token choosing top_k of E
// uniformly (random weights route about so), its requests alternating over `variants` variants that
// share half of each layer's experts byte for byte: the shared half read once whoever touched it,
// the rest per variant (one variant: E · (1 − ((E − k)/E)^batch)).
double experts_read(const ModelSpec& s, std::int64_t batch, int variants) {
  const double e = static_cast<double>(s.num_experts), miss = (e - static_cast<double>(s.top_k)) / e;
  auto touched = [&](std::int64_t tokens) {
    double none = 1;
    for (std::int64_t b = 0; b < tokens; ++b) none *= miss;
    return 1 - none;
  };
  return e / 2 * touched(batch) + e / 2 * variants * touched(batch / variants);
}

// `dirs`: one variant, or several served together (every expert of each pinned, every set resident),
// the requests of a batch alternating over them.
EngineRow run_engine(const std::string& name, const std::vector<fs::path>& dirs, CpuWeights weights, const std::vector<std::int64_t>& batches,
                     const std::vector<std::int64_t>& prompts, std::int64_t decode, int reps) {
  EngineRow row;
  row.name = name;
  const std::uint64_t before = resident_bytes();
  Family family;
  open_family(family, dirs);
  HostStore store(family);
  const ModelSpec& s = store.spec();
  const DType stored = store.tensor(store.expert_tensors(0).gate).dtype;
  row.bytes_per_param = weights != CpuWeights::Fp32 && stored == DType::BF16 ? 2.0 : 4.0;
  std::vector<PinnedExpert> pinned;
  for (int t = 0; t < store.targets(); ++t)
    for (const PinnedExpert& p : every_position(s, t)) pinned.push_back(p);
  Engine engine(std::make_shared<Runtime>(store, RuntimeConfig{.pinned = pinned, .hit = HitPolicy::Strict, .resident_sets = store.sets(),
                                                               .cpu_weights = weights}),
                EngineOptions{.scheduler = {.max_sequences = 64}});
  std::mt19937_64 rng(5);
  auto prompt_of = [&](std::int64_t n) {
    std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
    for (auto& id : ids) id = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(s.vocab_size));
    return ids;
  };
  auto serve = [&](std::int64_t batch, std::int64_t prompt, std::int64_t tokens) {
    std::vector<ServeRequest> requests;
    for (std::int64_t b = 0; b < batch; ++b)  // no stop ids: every token
      requests.push_back({store.name(static_cast<int>(b % store.targets())), GenerationRequest{.prompt = prompt_of(prompt), .max_new_tokens = tokens}});
    std::vector<RequestResult> out;
    for (const auto& h : engine.submit_all(std::move(requests))) out.push_back(h->wait());
    return out;
  };
  serve(store.targets(), 8, 2);  // every slot and set loaded: what the rows measure is steps
  row.rss = resident_bytes() - std::min(before, resident_bytes());
  for (std::int64_t batch : batches) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      // Every sequence starts in one step and decodes in lockstep: TPOT is the step's time.
      double sum = 0;
      const auto results = serve(batch, 8, decode + 1);
      for (const RequestResult& x : results) sum += x.stats.tpot();
      best = std::min(best, sum / static_cast<double>(results.size()));
    }
    row.step_ms.push_back(best * 1e3);
  }
  for (std::int64_t prompt : prompts) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) best = std::min(best, serve(1, prompt, 1).front().stats.ttft());
    row.prefill_tps.push_back(static_cast<double>(prompt) / best);
  }
  return row;
}

}  // namespace

void bench_engine_decode(const fs::path& dir, std::int64_t decode, int reps, int threads) {
  // Issue 64's model: hidden 1024, 8 layers of 8 experts of 2816, top-2, vocab 32000 (about 0.6 B).
  const ModelSpec spec = mixtral_like_spec(32000, 1024, 2816, 8, 8);
  const fs::path bf16 = dir / "bf16", fp32 = dir / "fp32", pair = dir / "bf16-pair";
  for (const auto& [where, dtype] : {std::pair{bf16, DType::BF16}, std::pair{fp32, DType::F32}})
    if (!fs::exists(where / "model.safetensors")) write_synthetic_checkpoint(where, spec, dtype, 1);
  // Two fine-tunes of one base, sharing half of each layer's experts byte for byte (#6).
  write_synthetic_family(pair, spec, DType::BF16, 2, [&](std::int64_t, std::int64_t e) { return e < spec.num_experts / 2; }, 3);
  const std::vector<std::int64_t> batches{1, 4, 16}, prompts{128, 512};
  // The probes' parallel work on a passing thread, as the runtime's loading: a team left on this thread
  // would make every step's regions start by waking their worker (threads.h).
  double gbs = 0, cached_gbs = 0, gemm_gflops = 0;
  on_passing_thread([&] {
    gbs = read_gbs(std::size_t{1} << 30);
    cached_gbs = read_gbs(std::size_t{64} << 20);
    gemm_gflops = measure_matmul(64, 1024, 1024).gflops;
  });
  std::vector<EngineRow> rows;
  rows.push_back(run_engine("bf16 file, held bf16", {bf16}, CpuWeights::Stored, batches, prompts, decode, reps));
  rows.push_back(run_engine("bf16 file, held fp32", {bf16}, CpuWeights::Fp32, batches, prompts, decode, reps));
  rows.push_back(run_engine("bf16 file, read in place", {bf16}, CpuWeights::Mapped, batches, prompts, decode, reps));
  rows.push_back(run_engine("fp32 file, held fp32", {fp32}, CpuWeights::Stored, batches, prompts, decode, reps));
  rows.push_back(run_engine("fp32 file, read in place", {fp32}, CpuWeights::Mapped, batches, prompts, decode, reps));
  const std::vector<std::int64_t> mixed{4, 16};  // half of each batch a variant
  std::vector<EngineRow> pairs;
  pairs.push_back(run_engine("2 variants, held bf16", {pair / "v0", pair / "v1"}, CpuWeights::Stored, mixed, {}, decode, reps));
  pairs.push_back(run_engine("2 variants, held fp32", {pair / "v0", pair / "v1"}, CpuWeights::Fp32, mixed, {}, decode, reps));
  pairs.push_back(run_engine("2 variants, in place", {pair / "v0", pair / "v1"}, CpuWeights::Mapped, mixed, {}, decode, reps));

  const auto params = static_cast<double>(parameter_count(spec));
  // A decode step reads every non-expert weight but the embedding (a row a token) and the experts its
  // tokens chose, in each layer.
  const double expert_params = static_cast<double>(3 * spec.hidden_size * spec.expert_intermediate);
  const double non_expert = params - static_cast<double>(spec.num_layers * spec.num_experts) * expert_params -
                            static_cast<double>(spec.vocab_size * spec.hidden_size);
  std::printf("\nDecode through the engine, CPU backend, synthetic Mixtral %.2f B parameters (%s), %d threads, %lld tokens, best of %d;\n"
              "read bandwidth %.1f GB/s (1 GiB summed, every thread; 64 MiB: %.1f GB/s, from cache); LibTorch's GEMM %.1f GFLOP/s\n"
              "([64, 1024] x [1024, 1024], in cache). Floor: the longer of the weight bytes a step reads / the 1 GiB bandwidth\n"
              "(experts: those a batch touches with uniform routing, an estimate for B > 1) and its products' flops / the GEMM\n"
              "rate (marked c where that is the longer); where the last-level cache holds much of a step's weights, the floor is lower.\n",
              params / 1e9, dir.string().c_str(), threads, static_cast<long long>(decode), reps, gbs, cached_gbs, gemm_gflops);
  // Each step reads every variant's non-expert set, and the experts its tokens touched.
  auto table = [&](const std::vector<EngineRow>& of, const std::vector<std::int64_t>& sizes, const std::vector<std::int64_t>& prefills, int variants) {
    std::printf("%-26s %9s", "weights", "RSS held");
    for (std::int64_t b : sizes) std::printf(" | B=%-2lld ms/step  floor  x floor", static_cast<long long>(b));
    for (std::int64_t p : prefills) std::printf(" | prefill %lld tok/s", static_cast<long long>(p));
    std::printf("\n");
    for (const EngineRow& r : of) {
      std::printf("%-26s %9s", r.name.c_str(), format_bytes(r.rss).c_str());
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        const double read = (variants * non_expert + static_cast<double>(spec.num_layers) * experts_read(spec, sizes[i], variants) * expert_params) *
                            r.bytes_per_param;
        // Every token of the batch through the non-expert products (the head included: each emits
        // logits) and its top-k experts.
        const double flops = 2.0 * static_cast<double>(sizes[i]) *
                             (non_expert + static_cast<double>(spec.num_layers * spec.top_k) * expert_params);
        const double read_ms = read / (gbs * 1e9) * 1e3, compute_ms = flops / (gemm_gflops * 1e9) * 1e3;
        const double floor_ms = std::max(read_ms, compute_ms);
        std::printf(" | %13.2f %6.2f%s %6.2fx", r.step_ms[i], floor_ms, compute_ms > read_ms ? "c" : " ", r.step_ms[i] / floor_ms);
      }
      for (double tps : r.prefill_tps) std::printf(" | %17.0f", tps);
      std::printf("\n");
    }
  };
  table(rows, batches, prompts, 1);
  std::printf("\nBatches mixed over two variants (bf16 files sharing half their experts; both sets resident, every expert pinned)\n");
  table(pairs, mixed, {}, 2);
}

}  // namespace mosaic::cli
