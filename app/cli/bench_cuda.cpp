// bench-cuda: the CUDA backend on the H100, each number against a floor measured in the same run,
// on a synthetic Mixtral-architecture bf16 family (default: hidden 2048, intermediate 5632, 16
// layers, 8 experts, top-2, 16 heads, 4 KV heads, vocab 32000; two variants):
//  - decode time per output token at batch 1, every expert resident, against bytes read per token ÷
//    the read bandwidth of a kernel that only reads; and each of its kernels alone, against its bytes;
//  - a delta expert's three projections (DeltaMoE's packed deltas) against the bf16 GEMVs they replace;
//  - batched decode steps of 1–256 sequences mixed over the variants, against their weights-read floor:
//    the host planning steps past 64 pairs, against every step routed on the device, its groups on
//    CUDA cores or on tensor cores;
//  - expert loads (misses) and non-expert swaps against the pinned host-to-device rate;
//  - a swap filled ahead while another variant decodes: its cost to the decode, and what is left of it;
//  - prefetch against lru with few spare slots: the miss time it hides, the share of its copies used;
//  - prompts of 512, 2048 and 8192 tokens, attention token by token, tiled, and tiled on tensor cores
//    (with the experts too, where the pairs fit one routing launch), against the flops floor;
//  - a step's token draws: rows copied back whole against candidates prepared on the device.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "cli/commands.h"
#include "cli/output_paths.h"
#include "cli/serving_args.h"
#include "cli/step_decoder.h"
#include "kernels/launch.h"
#include "kernels/moe_experts.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "model/synthetic.h"
#include "runtime/cuda/cuda_probe.h"
#include "runtime/cuda/kernel_timing.h"
#include "runtime/engine.h"
#include "common/stopwatch.h"

namespace fs = std::filesystem;

namespace mosaic::cli {
namespace {

using Clock = std::chrono::steady_clock;

void run_bench(std::int64_t hidden, std::int64_t inter, std::int64_t layers, std::int64_t vocab, std::int64_t heads, std::int64_t kv_heads,
               int steps, const fs::path& dir, const fs::path& json_out, bool write_only, bool shared_experts) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines as they come, also into a file
  checked_device("cuda");
  const cuda::DeviceRates rates = cuda::measure_rates();
  std::printf("device: %s\n  read bandwidth %.0f GB/s, pinned host→device %.1f GB/s, cuBLAS bf16 GEMM %.0f TFLOP/s\n", rates.name.c_str(),
              rates.read_bytes_per_s / 1e9, rates.pinned_h2d_bytes_per_s / 1e9, rates.bf16_flops / 1e12);

  ModelSpec spec = mixtral_like_spec(vocab, hidden, inter, layers, 8);
  spec.num_heads = heads;
  spec.num_kv_heads = kv_heads;
  spec.head_dim = hidden / heads;
  Family family;
  const auto t_write = Clock::now();
  for (int v = 0; v < 2; ++v) {
    const fs::path d = dir / ("variant-" + std::to_string(v));
    const std::uint64_t seed = 90 + static_cast<std::uint64_t>(v);
    // --shared-experts: the first half of every layer's experts are variant 0's, byte for byte.
    auto seed_of = [&](const ExpectedTensor& t) { return shared_experts && t.is_expert() && t.expert < spec.num_experts / 2 ? 90 : seed; };
    if (!fs::exists(d / "model.safetensors")) write_synthetic_checkpoint(d, spec, DType::BF16, seed, seed_of);
    family.add("v" + std::to_string(v), d);
  }
  const HostStore store(family);
  std::printf("family: 2 × %.2f GB bf16 (%.0f s to write and read)\n", double(store.host_bytes()) / 2e9, seconds_since(t_write));
  if (write_only) return;
  nlohmann::ordered_json out{{"device", rates.name}, {"read_GBps", rates.read_bytes_per_s / 1e9},
                             {"pinned_h2d_GBps", rates.pinned_h2d_bytes_per_s / 1e9}, {"bf16_TFLOPs", rates.bf16_flops / 1e12}};

  // Bytes one decode token reads: every non-expert weight but the embedding table (one row), and
  // top_k experts per MoE layer.
  const double embed_bytes = double(spec.vocab_size * spec.hidden_size) * 2;
  const double per_token = double(store.non_expert_bytes()) - embed_bytes + double(spec.top_k * spec.num_sparse_layers()) * double(store.expert_bytes());
  auto pin_all = [&](std::initializer_list<int> targets) {
    std::vector<PinnedExpert> p;
    for (int t : targets)
      for (std::int64_t l = 0; l < spec.num_layers; ++l)
        for (std::int64_t e = 0; e < spec.num_experts; ++e) p.push_back({l, e, t});
    return p;
  };

  {  // 1. Batch 1, every expert resident: launched kernel by kernel, and replayed from CUDA graphs.
    std::printf("\ndecode, batch 1, all experts resident (%d steps)\n", steps);
    const double floor = per_token / rates.read_bytes_per_s;
    std::printf("  %-56s %8.3f ms   (%.2f GB ÷ %.0f GB/s)\n", "floor", floor * 1e3, per_token / 1e9, rates.read_bytes_per_s / 1e9);
    nlohmann::ordered_json rows{{"floor_ms", floor * 1e3}, {"bytes_per_token", per_token}};
    // Fused small kernels (the default) and one by one (CudaOptions::fused off), each way launched and
    // replayed: the fusions' gain, measured in this run; those four in plain stream order. Then the
    // fused graphs with programmatic dependent launches, the default where the GPU runs them.
    // Last, the default without its L2 prefetches (CudaOptions::l2_prefetch), and without its layer
    // timing (CudaOptions::layer_times): what the timing's events between the kernels cost a lone
    // request's step.
    struct Way {
      bool fused, graphs, pdl, timed = true, prefetch = true;
    };
    for (const Way way : {Way{false, false, false}, Way{false, true, false}, Way{true, false, false}, Way{true, true, false}, Way{true, true, true},
                          Way{true, true, true, true, false}, Way{true, true, true, false}}) {
      const CudaOptions options{.graphs = way.graphs, .fused = way.fused, .layer_times = way.timed, .l2_prefetch = way.prefetch,
                                .programmatic_launches = way.pdl};
      Runtime rt(store, RuntimeConfig{.pinned = pin_all({0}), .hit = HitPolicy::Strict, .device = Device::Cuda, .cuda = options});
      rt.make_resident(std::vector<int>{store.set_of(0)});
      const double tpot = StepDecoder(rt, store, {0}, 16, 16 + steps + 8).mean_decode(steps);
      const std::string name = std::string(way.graphs ? "Mosaic, CUDA graphs" : "Mosaic, kernel by kernel") + (way.fused ? "" : ", unfused") +
                               (way.pdl ? ", programmatic" : "") + (way.prefetch ? "" : ", no L2 prefetch") + (way.timed ? "" : ", untimed");
      std::printf("  %-56s %8.3f ms   %.2f× the floor\n", name.c_str(), tpot * 1e3, tpot / floor);
      rows[std::string(way.graphs ? "graphs_tpot_ms" : "eager_tpot_ms") + (way.fused ? "" : "_unfused") + (way.pdl ? "_pdl" : "") +
           (way.prefetch ? "" : "_no_prefetch") + (way.timed ? "" : "_untimed")] = tpot * 1e3;
    }
    // The flag stays as the last backend set it; the kernel table times each kernel alone, plainly.
    kernels::set_programmatic_launches(false);

    // Where the graph step's time goes: each of its kernels alone, at the steps' mean context.
    const int context = 20 + steps / 2;  // the prompt's 16, 3 warm-up steps, half the timed ones
    const std::vector<cuda::KernelTime> kernels = cuda::time_decode_kernels(spec, context);
    double sum = 0, unfused_sum = 0;
    for (const cuda::KernelTime& k : kernels) sum += k.per_token * k.seconds;
    for (const cuda::KernelTime& k : cuda::time_decode_kernels(spec, context, /*fused=*/false)) unfused_sum += k.per_token * k.seconds;
    std::printf("\n  each kernel alone (a graph of its launches, weights rotated past the L2; context %d; share: of the kernels' sum, not of a step)\n", context);
    std::printf("  %-26s %9s %9s %9s %6s %8s %8s\n", "kernel", "per token", "us each", "ms/token", "share", "GB/s", "of read");
    nlohmann::ordered_json table = nlohmann::json::array();
    for (const cuda::KernelTime& k : kernels) {
      const double per_token_s = k.per_token * k.seconds;
      std::printf("  %-26s %9d %9.2f %9.3f %5.1f%%", k.name.c_str(), k.per_token, k.seconds * 1e6, per_token_s * 1e3, 100 * per_token_s / sum);
      if (k.bytes > 0) std::printf(" %8.0f %8.2f\n", k.bytes / k.seconds / 1e9, k.bytes / k.seconds / rates.read_bytes_per_s);
      else std::printf(" %8s %8s\n", "-", "-");
      table.push_back({{"kernel", k.name}, {"per_token", k.per_token}, {"us", k.seconds * 1e6}, {"bytes", k.bytes}});
    }
    const double step = rows["graphs_tpot_ms"].get<double>() / 1e3;
    std::printf("  %-26s %9s %9s %9.3f   a graph step %.3f ms: %.3f ms outside the kernels (host work, copies)\n", "sum", "", "", sum * 1e3,
                step * 1e3, (step - sum) * 1e3);
    const double unfused_step = rows["graphs_tpot_ms_unfused"].get<double>() / 1e3;
    std::printf("  %-26s %9s %9s %9.3f   a graph step %.3f ms: %.3f ms outside the kernels\n", "sum, unfused", "", "", unfused_sum * 1e3,
                unfused_step * 1e3, (unfused_step - unfused_sum) * 1e3);
    rows["kernels"] = table;
    rows["kernels_sum_ms"] = sum * 1e3;
    rows["kernels_sum_ms_unfused"] = unfused_sum * 1e3;

    // The decode attention at longer contexts, split over positions (the default) and one block per
    // head (MOSAIC_CUDA_FUSED=0), against its floor: the keys and values read once.
    std::printf("\n  decode attention, one sequence: split over positions against one block per head\n");
    std::printf("  %8s %10s %10s %10s %8s %8s\n", "context", "floor us", "split us", "one us", "split ×", "one ×");
    nlohmann::ordered_json attention = nlohmann::json::array();
    for (const int positions : {64, 512, 2048, 4096, 12288}) {
      const double bytes = 2.0 * positions * double(spec.kv_width()) * 2, attention_floor = bytes / rates.read_bytes_per_s;
      const cuda::AttentionTime t = cuda::time_decode_attention(spec, positions);
      const double split = t.split, one = t.one_block;
      std::printf("  %8d %10.2f %10.2f %10.2f %8.1f %8.1f\n", positions, attention_floor * 1e6, split * 1e6, one * 1e6, split / attention_floor,
                  one / attention_floor);
      attention.push_back({{"context", positions}, {"floor_us", attention_floor * 1e6}, {"split_us", split * 1e6}, {"one_block_us", one * 1e6}});
    }
    rows["decode_attention"] = attention;

    // A delta expert against the dense one (issue 61 #5: at most 0.6 × its time): the three
    // projections of one expert as bf16 GEMVs and as packed deltas through each delta kernel, at decode
    // sizes (a delta expert's own tokens: 1 at batch 1, a few in a batch). "floor": the delta's bytes
    // over the dense one's, the ratio if both read at the same rate.
    std::printf("\n  delta expert, %lld × %lld (gate, up, down), each kernel alone against the bf16 GEMV (target: ≤ 0.6× dense)\n",
                static_cast<long long>(spec.expert_intermediate), static_cast<long long>(spec.hidden_size));
    std::printf("  %-11s %2s %9s %9s %9s %7s %7s %7s %10s %10s %10s\n", "delta", "n", "dense us", "rows us", "tiles us", "rows ×", "tiles ×",
                "floor ×", "dense GB/s", "rows GB/s", "tiles GB/s");
    const std::vector<int> delta_tokens{1, 2, 4, 8};
    const auto gate_up = cuda::time_delta_kernels(spec.expert_intermediate, spec.hidden_size, delta_tokens);
    const auto down = cuda::time_delta_kernels(spec.hidden_size, spec.expert_intermediate, delta_tokens);
    nlohmann::ordered_json deltas = nlohmann::json::array();
    for (std::size_t i = 0; i < gate_up.size(); ++i) {
      const cuda::DeltaKernelTime &g = gate_up[i], &d = down[i];
      const double dense = 2 * g.dense + d.dense, by_rows = 2 * g.rows + d.rows, tiles = g.tiles > 0 && d.tiles > 0 ? 2 * g.tiles + d.tiles : 0;
      const double dense_bytes = 2 * g.dense_bytes + d.dense_bytes, delta_bytes = 2 * g.delta_bytes + d.delta_bytes;
      const std::string format = std::to_string(g.bits) + "-bit " + (g.sparse24 ? "2:4" : "dense");
      std::printf("  %-11s %2d %9.2f %9.2f %9.2f %6.2f× %6.2f× %6.2f× %10.0f %10.0f %10.0f\n", format.c_str(), g.tokens, dense * 1e6, by_rows * 1e6,
                  tiles * 1e6, by_rows / dense, tiles / dense, delta_bytes / dense_bytes, dense_bytes / dense / 1e9, delta_bytes / by_rows / 1e9,
                  tiles > 0 ? delta_bytes / tiles / 1e9 : 0.0);
      deltas.push_back({{"format", format}, {"tokens", g.tokens}, {"dense_us", dense * 1e6}, {"rows_us", by_rows * 1e6}, {"tiles_us", tiles * 1e6},
                        {"dense_bytes", dense_bytes}, {"delta_bytes", delta_bytes}});
    }
    std::printf("  GB/s: the bytes each must read (bf16 matrices, packed arrays) per second; the read bandwidth is %.0f GB/s\n",
                rates.read_bytes_per_s / 1e9);
    rows["delta_expert"] = deltas;
    out["batch1"] = rows;
  }

  {  // 2. Batched decode over both variants (every expert of both resident): today's way (the host
     // plans steps of more than 64 pairs, cuBLAS taking their large groups), and every step routed on
     // the device with its groups on CUDA cores or on tensor cores (issue 65 #1-2), in the same run.
    struct Way {
      const char* name;
      int route_pairs;
      bool tensor_cores;
    };
    const Way ways[] = {{"host plans > 64 pairs", 64, false}, {"device routes, CUDA cores", kernels::kRouteMaxPairs, false},
                        {"device routes, tensor cores", kernels::kRouteMaxPairs, true}};
    std::printf("\nbatched decode, sequences alternating over 2 variants (step ms, × the floor)\n  %4s %10s", "seqs", "floor ms");
    for (const Way& way : ways) std::printf(" %28s", way.name);
    std::printf("\n");
    std::vector<std::unique_ptr<Runtime>> runtimes;
    for (const Way& way : ways) {
      const CudaOptions options{.device_route_pairs = way.route_pairs, .tensor_core_experts = way.tensor_cores};
      runtimes.push_back(std::make_unique<Runtime>(
          store, RuntimeConfig{.pinned = pin_all({0, 1}), .hit = HitPolicy::Strict, .resident_sets = 2, .device = Device::Cuda, .cuda = options}));
      runtimes.back()->make_resident(std::vector<int>{store.set_of(0), store.set_of(1)});
    }
    nlohmann::ordered_json rows = nlohmann::json::array();
    for (int n : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
      std::vector<int> targets;
      for (int i = 0; i < n; ++i) targets.push_back(i % 2);
      // Floor: each variant's non-expert weights once, and the experts its sequences are expected
      // to touch under uniform routing: E · (1 − (1 − k/E)^n_v) per layer.
      double bytes = 0;
      for (int v = 0; v < 2; ++v) {
        const int nv = n / 2 + (v == 0 ? n % 2 : 0);
        if (nv == 0) continue;
        const double E = double(spec.num_experts), k = double(spec.top_k);
        bytes += double(store.non_expert_bytes()) - embed_bytes + double(spec.num_sparse_layers()) * E * (1 - std::pow(1 - k / E, nv)) * double(store.expert_bytes());
      }
      const double floor = bytes / rates.read_bytes_per_s;
      std::printf("  %4d %10.3f", n, floor * 1e3);
      nlohmann::ordered_json row{{"sequences", n}, {"floor_ms", floor * 1e3}};
      for (std::size_t w = 0; w < runtimes.size(); ++w) {
        StepDecoder d(*runtimes[w], store, targets, 16, 16 + 12);
        d.step();
        d.step();
        double total = 0;
        const int reps = 8;
        for (int i = 0; i < reps; ++i) total += d.step();
        const double step = total / reps;
        std::printf(" %17.3f (%5.2f×)    ", step * 1e3, step / floor);
        if (w == 0) {
          row["step_ms"] = step * 1e3;
          row["tokens_per_s"] = n / step;
        } else {
          row[w == 1 ? "device_routed_ms" : "tensor_core_ms"] = step * 1e3;
        }
      }
      std::printf("\n");
      rows.push_back(row);
    }
    out["batched"] = rows;
  }

  {  // 3. Misses: nothing pinned, every routed expert loaded (transient) — the link's rate for expert loads.
    Runtime rt(store, RuntimeConfig{.hit = HitPolicy::Strict, .miss = "transient", .device = Device::Cuda});
    rt.make_resident(std::vector<int>{store.set_of(0)});
    StepDecoder d(rt, store, {0}, 4, 4 + 12);
    std::uint64_t bytes = 0;
    double seconds = 0, wall = 0;
    d.step();
    for (int i = 0; i < 8; ++i) {
      const auto t0 = Clock::now();
      d.step();
      wall += seconds_since(t0);
    }
    // The load counters, from a request through the engine.
    Engine engine(std::make_shared<Runtime>(store, RuntimeConfig{.hit = HitPolicy::Strict, .miss = "transient", .device = Device::Cuda}));
    const RequestResult r = engine.submit({"v0", {.prompt = random_tokens(4, 3, spec.vocab_size), .max_new_tokens = 8}})->wait();
    for (const LayerCounts& c : r.stats.counters.layers) {
      bytes += c.load_bytes;
      seconds += c.load_seconds;
    }
    const double rate = double(bytes) / seconds;
    std::printf("\nexpert loads (transient misses, nothing pinned)\n  %.2f GB in %.3f s: %.1f GB/s = %.2f of pinned peak; decode step %.1f ms\n", bytes / 1e9,
                seconds, rate / 1e9, rate / rates.pinned_h2d_bytes_per_s, wall / 8 * 1e3);
    out["misses"] = {{"bytes", bytes}, {"seconds", seconds}, {"GBps", rate / 1e9}, {"of_pinned_peak", rate / rates.pinned_h2d_bytes_per_s}};
  }

  {  // 4. Swaps: one buffer, the two variants' non-expert sets alternately.
    Runtime rt(store, RuntimeConfig{.hit = HitPolicy::Strict, .miss = "transient", .device = Device::Cuda});
    double seconds = 0;
    std::uint64_t bytes = 0;
    for (int i = 0; i < 6; ++i)
      for (const SwapRecord& s : rt.make_resident(std::vector<int>{store.set_of(i % 2)}))
        if (i >= 2) {  // the first two fill the buffer
          seconds += s.seconds;
          bytes += s.bytes;
        }
    const double per = seconds / 4, floor = double(bytes) / 4 / rates.pinned_h2d_bytes_per_s;
    std::printf("\nnon-expert swap\n  %.3f ms for %.2f GB; floor %.3f ms (÷ pinned peak); ratio %.2f×\n", per * 1e3, double(bytes) / 4e9, floor * 1e3, per / floor);
    out["swap"] = {{"ms", per * 1e3}, {"bytes", bytes / 4}, {"floor_ms", floor * 1e3}, {"ratio", per / floor}};
  }
  auto save = [&] {
    if (!json_out.empty()) write_file_atomically(json_out, [&](std::ostream& s) { s << out.dump(2) << "\n"; });
  };
  save();  // what is measured so far stays, whatever the next part does

  {  // 5. A swap ahead (double buffering): variant 1's set filled into the second buffer while variant 0
     // decodes: what the fill costs the decode (link and memory shared), how long it takes overlapped,
     // and what a step that then needs the set still waits.
    const int reps = 3;
    double alone = 0, during = 0, fill = 0, exposed = 0;
    int during_steps = 0;
    for (int rep = 0; rep < reps; ++rep) {
      Runtime rt(store, RuntimeConfig{.pinned = pin_all({0}), .hit = HitPolicy::Strict, .resident_sets = 2, .device = Device::Cuda});
      rt.make_resident(std::vector<int>{store.set_of(0)});
      StepDecoder d(rt, store, {0}, 16, 16 + 80);
      d.step();
      d.step();
      for (int i = 0; i < 4; ++i) alone += d.step() / (4.0 * reps);
      const auto t0 = Clock::now();
      rt.load_ahead(std::vector<int>{store.set_of(1)});
      for (int i = 0; i < 60 && !rt.loading_sets().empty(); ++i, ++during_steps) during += d.step();
      fill += seconds_since(t0) / reps;
      for (const SwapRecord& r : rt.make_resident(std::vector<int>{store.set_of(0), store.set_of(1)})) exposed += r.seconds / reps;
    }
    const double step_during = during_steps ? during / during_steps : 0;
    const double swap_ms = out.contains("swap") ? out["swap"]["ms"].get<double>() : 0;
    std::printf("\nswap ahead (two set buffers; variant 1's set filled while variant 0 decodes, %d repeats)\n", reps);
    std::printf("  decode step alone %.3f ms, during the fill %.3f ms (%.2f×, %d steps in all)\n", alone * 1e3, step_during * 1e3,
                alone > 0 ? step_during / alone : 0.0, during_steps);
    std::printf("  the fill, overlapped: %.3f ms (a swap alone: %.3f ms); a step then needing the set waited %.3f ms\n", fill * 1e3, swap_ms,
                exposed * 1e3);
    out["swap_ahead"] = {{"step_alone_ms", alone * 1e3}, {"step_during_fill_ms", step_during * 1e3}, {"steps_during_fill", during_steps},
                         {"fill_ms", fill * 1e3}, {"exposed_ms", exposed * 1e3}};
  }
  save();

  {  // 6. Prefetch: half of each layer's experts pinned, 2 spare slots a layer; one request decoding
     // under lru, then under prefetch (the next layer's experts copied while this layer computes).
     // The miss time prefetching hides, and how much of its own copying the compute covered.
    const std::int64_t spare = 2;
    std::vector<PinnedExpert> half;
    for (std::int64_t l = 0; l < spec.num_layers; ++l)
      for (std::int64_t e = 0; e < spec.num_experts / 2; ++e) half.push_back({l, e, 0});
    const std::uint64_t floor_bytes = Runtime(store, RuntimeConfig{.pinned = half, .hit = HitPolicy::Strict, .device = Device::Cuda}).budget().used();
    const std::uint64_t budget = floor_bytes + static_cast<std::uint64_t>(spare * spec.num_sparse_layers()) * store.expert_bytes();
    struct Served { double tpot = 0, loads = 0, exposed = 0; LayerCounts total; };
    // `batch` requests decoding together, over the family's variants in turn.
    auto serve = [&](const char* miss, int batch) {
      Engine engine(std::make_shared<Runtime>(store, RuntimeConfig{.pinned = half, .hit = HitPolicy::Strict, .miss = miss,
                                                                   .budget_bytes = budget, .device = Device::Cuda}));
      std::vector<ServeRequest> requests;
      for (int i = 0; i < batch; ++i)
        requests.push_back({store.name(i % store.targets()), {.prompt = random_tokens(16, 5 + static_cast<std::uint64_t>(i), spec.vocab_size), .max_new_tokens = 64}});
      Served s;
      double tokens = 0;
      for (const auto& h : engine.submit_all(requests)) {
        const RequestResult r = h->wait();
        const LayerCounts t = r.stats.counters.total();
        s.total += t;
        s.tpot += r.stats.tpot() / batch;
        tokens += double(std::max<std::int64_t>(1, r.stats.generated_tokens));
      }
      s.loads = s.total.load_seconds / tokens;
      s.exposed = s.total.prefetch_seconds / tokens;
      return s;
    };
    const Served lru = serve("lru", 1), ahead = serve("prefetch-always", 1);
    const double waited_lru = lru.loads, waited_ahead = ahead.loads + ahead.exposed;
    const double hidden = waited_lru > 0 ? 1 - waited_ahead / waited_lru : 0;
    const double copy = double(ahead.total.prefetch_bytes) / rates.pinned_h2d_bytes_per_s;  // its copies at the pinned peak
    const double covered = copy > 0 ? 1 - ahead.total.prefetch_seconds / copy : 0;
    const double used = ahead.total.prefetches ? double(ahead.total.prefetch_used) / double(ahead.total.prefetches) : 0;
    std::printf("\nprefetch (half the experts pinned, %lld spare slots a layer, one request, 64 tokens)\n", static_cast<long long>(spare));
    std::printf("  TPOT: lru %.3f ms, prefetch-always %.3f ms (%.2f×)\n", lru.tpot * 1e3, ahead.tpot * 1e3, lru.tpot > 0 ? ahead.tpot / lru.tpot : 0.0);
    std::printf("  loads waited for per token: lru %.3f ms; prefetch-always %.3f ms + %.3f ms of prefetches not hidden: %.0f%% of the miss time %s\n",
                waited_lru * 1e3, ahead.loads * 1e3, ahead.exposed * 1e3, std::abs(hidden) * 100, hidden >= 0 ? "hidden" : "added");
    std::printf("  %lld prefetches, %.0f%% then hit; their copies %.3f ms at the pinned peak, %.0f%% covered by compute\n",
                static_cast<long long>(ahead.total.prefetches), used * 100, copy * 1e3, covered * 100);
    out["prefetch"] = {{"spare_slots", spare}, {"lru_tpot_ms", lru.tpot * 1e3}, {"prefetch_tpot_ms", ahead.tpot * 1e3},
                       {"lru_waited_ms_per_token", waited_lru * 1e3}, {"prefetch_waited_ms_per_token", waited_ahead * 1e3},
                       {"miss_time_hidden", hidden}, {"prefetches", ahead.total.prefetches}, {"prefetch_used", used},
                       {"copy_covered", covered}};
    // The adaptive prefetch (the gate stops predicting where it has not paid) against lru and the
    // predictor always on, at batch sizes where a layer's compute covers less and more of a copy.
    std::printf("  %-6s %10s %14s %18s %10s\n", "batch", "lru ms", "prefetch ms", "prefetch-always ms", "prefetches");
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const int batch : {1, 8, 32}) {
      const Served l = batch == 1 ? lru : serve("lru", batch), g = serve("prefetch", batch), a = batch == 1 ? ahead : serve("prefetch-always", batch);
      std::printf("  %-6d %10.3f %14.3f %18.3f %4lld / %lld\n", batch, l.tpot * 1e3, g.tpot * 1e3, a.tpot * 1e3,
                  static_cast<long long>(g.total.prefetches), static_cast<long long>(a.total.prefetches));
      rows.push_back({{"batch", batch}, {"lru_tpot_ms", l.tpot * 1e3}, {"prefetch_tpot_ms", g.tpot * 1e3}, {"prefetch_always_tpot_ms", a.tpot * 1e3},
                      {"prefetches", g.total.prefetches}, {"prefetches_always", a.total.prefetches}});
    }
    out["prefetch"]["adaptive"] = rows;
  }
  save();

  {  // 7. Prompts of 512, 2048 and 8192 tokens, every expert resident: attention token by token against
     // the tiled kernel (CudaOptions::tiled_attention), against the flops floor at the measured GEMM peak.
    std::printf("\nprefill, one prompt, all experts resident (best of 3)\n");
    nlohmann::ordered_json all = nlohmann::json::array();
    for (const std::int64_t prompt : {std::int64_t{512}, std::int64_t{2048}, std::int64_t{8192}}) {
      // 2 flops per bf16 weight (2 bytes) a token reads; the output projection for the last token only.
      const double head = 2.0 * double(spec.vocab_size * spec.hidden_size);
      const double matmul = (per_token - head) * double(prompt) + head;
      const double attention = 2.0 * double(spec.head_dim * spec.num_heads * spec.num_layers) * double(prompt * prompt);  // causal QKᵀ and PV
      const double floor = (matmul + attention) / rates.bf16_flops;
      std::printf("  %lld tokens: floor %8.3f ms   (%.2f TFLOP ÷ %.0f TFLOP/s; attention %.2f of it)\n", static_cast<long long>(prompt), floor * 1e3,
                  (matmul + attention) / 1e12, rates.bf16_flops / 1e12, attention / (matmul + attention));
      nlohmann::ordered_json rows{{"prompt", prompt}, {"floor_ms", floor * 1e3}};
      // Issue 65 #2-3: the tiles on tensor cores; and with the experts too, where the prompt's pairs
      // fit one routing launch (512 tokens × top-2), routed on the device and grouped on tensor cores.
      struct Way {
        const char* name;
        const char* key;
        CudaOptions options;
      };
      const Way ways[] = {{"attention token by token", "per_token", {.tiled_attention = false}},
                          {"tiled attention", "tiled", {.tiled_attention = true}},
                          {"tiled on tensor cores", "tensor_core_tiles", {.tiled_attention = true, .tensor_core_attention = true}},
                          {"…, experts too", "tensor_core_all",
                           {.tiled_attention = true, .device_route_pairs = kernels::kRouteMaxPairs, .tensor_core_experts = true,
                            .tensor_core_attention = true}}};
      for (const Way& way : ways) {
        try {  // one size's failure (the device's memory at 8192, say) leaves the others' rows
          Runtime rt(store, RuntimeConfig{.pinned = pin_all({0}), .hit = HitPolicy::Strict, .device = Device::Cuda, .cuda = way.options});
          rt.make_resident(std::vector<int>{store.set_of(0)});
          double best = 0;
          for (int rep = 0; rep < 3; ++rep) {
            StepDecoder d(rt, store, {0}, static_cast<std::size_t>(prompt), prompt + 8);
            const double t = d.step();
            best = rep == 0 ? t : std::min(best, t);
          }
          std::printf("    %-28s %8.3f ms   %.1f× the floor\n", way.name, best * 1e3, best / floor);
          rows[std::string(way.key) + "_ms"] = best * 1e3;
        } catch (const std::exception& e) {
          std::printf("    %-28s failed: %s\n", way.name, e.what());
          rows[std::string(way.key) + "_error"] = e.what();
        }
      }
      all.push_back(rows);
    }
    out["prefill"] = all;
  }
  save();

  {  // 8. The step's draws: rows copied back whole and drawn on the host, against candidates prepared
     // on the device (kernels/token_candidates.h; CudaOptions::prepared_draws), at 1, 8 and 64 sequences of
     // variant 0, greedy and at T 0.7. The steps include the draws, as the engine's do.
    std::printf("\ntoken draws: step ms with the rows copied back whole, and with candidates prepared on the device\n");
    std::printf("  %4s %-8s %10s %10s %8s\n", "seqs", "sampling", "whole", "prepared", "ratio");
    nlohmann::ordered_json rows = nlohmann::json::array();
    std::map<std::pair<int, double>, double> whole;
    for (const bool prepared : {false, true}) {
      Runtime rt(store, RuntimeConfig{.pinned = pin_all({0}), .hit = HitPolicy::Strict, .device = Device::Cuda, .cuda = {.prepared_draws = prepared}});
      rt.make_resident(std::vector<int>{store.set_of(0)});
      for (const int n : {1, 8, 64})
        for (const double t : {0.0, 0.7}) {
          StepDecoder d(rt, store, std::vector<int>(static_cast<std::size_t>(n), 0), 16, 16 + 16);
          d.step();  // prefill
          d.sample({.temperature = t, .seed = 1});
          d.step();
          d.step();
          double best = 0;
          for (int i = 0; i < 8; ++i) {
            const double step = d.step();
            best = i == 0 ? step : std::min(best, step);
          }
          if (!prepared) {
            whole[{n, t}] = best;
            continue;
          }
          const double before = whole[{n, t}];
          std::printf("  %4d %-8s %10.3f %10.3f %7.2f×\n", n, t == 0 ? "greedy" : "T 0.7", before * 1e3, best * 1e3, before / best);
          rows.push_back({{"sequences", n}, {"temperature", t}, {"whole_ms", before * 1e3}, {"prepared_ms", best * 1e3}});
        }
    }
    out["draws"] = rows;
  }
  save();
}

}  // namespace

void add_bench_cuda_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-cuda", "CUDA backend on a synthetic Mixtral family: decode TPOT against the read-bandwidth floor, batching, loads, swaps, prefetch");
  struct Opts {
    std::int64_t hidden = 2048, inter = 5632, layers = 16, vocab = 32000, heads = 16, kv_heads = 4;
    int steps = 64;
    fs::path dir = "bench-cuda-family", json;
    bool write_only = false, shared_experts = false;
  };
  auto o = std::make_shared<Opts>();
  add_count_option<std::int64_t>(cmd, "--hidden", o->hidden, "hidden size", 64, 16384);
  add_count_option<std::int64_t>(cmd, "--intermediate", o->inter, "expert intermediate size", 64, 65536);
  add_count_option<std::int64_t>(cmd, "--layers", o->layers, "layers", 1, 256);
  add_count_option<std::int64_t>(cmd, "--vocab", o->vocab, "vocabulary", 16, 1 << 20);
  // Mixtral-8x7B itself: --hidden 4096 --intermediate 14336 --heads 32 --kv-heads 8.
  add_count_option<std::int64_t>(cmd, "--heads", o->heads, "attention heads (head size: hidden ÷ heads)", 1, 256);
  add_count_option<std::int64_t>(cmd, "--kv-heads", o->kv_heads, "key/value heads (a divisor of --heads)", 1, 256);
  add_count_option(cmd, "--steps", o->steps, "decode steps timed at batch 1", 1, 100000);
  cmd->add_option("--dir", o->dir, "where the synthetic family is written (reused when present)")->default_val("bench-cuda-family");
  cmd->add_option("--json", o->json, "also write the numbers here");
  cmd->add_flag("--write-only", o->write_only, "write the family (unless present) and stop: for other commands to serve it");
  cmd->add_flag("--shared-experts", o->shared_experts,
                "the two variants share the first half of every layer's experts byte for byte (a family that differs in half its experts)");
  cmd->callback([o] {
    check_output(o->json, "--json", {});
    check_output(o->dir, "--dir", {}, OutputKind::Folder);
    if (o->hidden % o->heads != 0 || o->heads % o->kv_heads != 0)
      throw InvalidArgument("bench-cuda", "--heads / --kv-heads", "--heads must divide --hidden and --kv-heads must divide --heads",
                            "e.g. --hidden 4096 --heads 32 --kv-heads 8");
    run_bench(o->hidden, o->inter, o->layers, o->vocab, o->heads, o->kv_heads, o->steps, o->dir, o->json, o->write_only, o->shared_experts);
  });
}

}  // namespace mosaic::cli
