// The cost model and the simulated clock: device profiles are validated field by field and round-
// trip; a model's shapes come from its config.json alone and agree with the runtime's byte model
// on real checkpoints; the A100 profile rebuilds the paper's Table 1 per-layer latencies it was
// derived from; the simulator follows the engine's scheduling rules (swaps only on a change of
// variant, hits as often as the layout keeps positions, MIG slices at 1/N of the link and device),
// is deterministic, and refuses budgets and strategies it cannot model, saying why; a profile fitted
// to steps a known profile priced is that profile again, and the measured CPU profile is valid;
// rates chosen from measured saturation cross every strategy's ridge; a layout is planned from
// config.json files alone.
#include <QTemporaryDir>
#include <QTest>

#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "runtime/capacity.h"
#include "runtime/engine.h"
#include "runtime/host_store.h"
#include "runtime/sim_backend.h"
#include "model/family.h"
#include "analysis/routing_measure.h"
#include "common/error.h"
#include "common/text_file.h"
#include "model/checkpoint.h"
#include "model/tokenizer.h"
#include "model/variant_folders.h"
#include "serving/runner.h"
#include "serving/saturation.h"
#include "serving/sweep.h"
#include "serving/config_layout.h"
#include "sim/profile_fit.h"
#include "sim/routing_model.h"
#include "serving/sim_sweep.h"
#include "sim/step_cost.h"
#include "store/recorder.h"
#include "store/sweep_recording.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

namespace {

fs::path samples() { return fs::path(MOSAIC_SOURCE_DIR) / "sample_configs"; }

// bench-device's tiny models: Mixtral's architecture at hidden 64.
ModelSpec tiny_spec(std::int64_t layers) {
  ModelSpec s = load_model_shapes(samples() / "families" / "mixtral-8x7b" / "base" / "config.json").spec;
  s.vocab_size = 320, s.hidden_size = 64, s.expert_intermediate = 128, s.num_layers = layers;
  s.head_dim = 16, s.num_heads = 4, s.num_kv_heads = 2;
  s.sparse_layers.assign(static_cast<std::size_t>(layers), true);
  return s;
}
DeviceProfile a100() { return load_device_profile(samples() / "devices" / "a100-pcie4-paper.json"); }
SimFamily mixtral() {
  return load_sim_family({samples() / "families" / "mixtral-8x7b" / "base", samples() / "families" / "mixtral-8x7b" / "instruct"});
}

// `n` requests alternating between the two variants, `gap` seconds apart: no queueing when the gap
// exceeds the service time.
std::vector<WorkloadRequest> alternating(std::size_t n, double gap, const std::vector<std::string>& names, std::size_t repeat_each = 1) {
  std::vector<WorkloadRequest> w;
  for (std::size_t i = 0; i < n; ++i)
    w.push_back({gap * static_cast<double>(i), names[(i / repeat_each) % names.size()], std::vector<std::int64_t>(20, 7), 25});
  return w;
}

StrategyConfig strategy(StrategyKind kind, std::int64_t capacity = 0) {
  StrategyConfig c;
  c.kind = kind;
  c.capacity = capacity;
  c.scheduler.max_sequences = 1;
  return c;
}

double mean_of(const std::vector<RequestRecord>& records, double (RequestStats::*metric)() const) {
  double sum = 0;
  for (const auto& r : records) sum += (r.stats.*metric)();
  return sum / static_cast<double>(records.size());
}

// DeepSeek-V2-Lite as config files in `root`: the base, ESFT adapters `law` (DeepSeek's spelling:
// no base named, over the base listed before it) and `code` (base named, shared experts tuned), and
// a delta folder `chat-delta` (4-bit 2:4) over the base.
std::vector<fs::path> deepseek_lite_family(const fs::path& root) {
  const fs::path config = samples() / "families" / "deepseek-v2-lite" / "base" / "config.json";
  for (const char* d : {"base", "law", "code", "chat-delta"}) {
    fs::create_directories(root / d);
    fs::copy_file(config, root / d / "config.json", fs::copy_options::overwrite_existing);
  }
  std::ofstream(root / "law" / "expert_cfg.json") << "{\"experts\": {\"1\": [0, 5], \"2\": [3]}, \"shared_experts\": false, \"non_expert_modules\": false}";
  std::ofstream(root / "code" / "expert_cfg.json") << "{\"base_model\": \"../base\", \"experts\": {\"1\": [7]}, \"shared_experts\": true}";
  std::ofstream(root / "chat-delta" / "delta.json")
      << "{\"schema\": \"mosaic.delta/1\", \"base_model\": \"../base\", \"base_sha256\": \"" << std::string(64, '0') << "\", \"bits\": 4, \"sparsity\": \"2:4\", \"group\": 128}";
  return {root / "base", root / "law", root / "chat-delta", root / "code"};
}

}  // namespace

class TestSimulator : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;

 private Q_SLOTS:

  void a_fit_recovers_the_profile_that_priced_the_steps() {
    // Steps of two small models and a larger one, priced by a known profile: the fit, started from
    // rates off by 3×, must come back to it (the same arithmetic bench-device runs on timed steps).
    DeviceProfile truth;
    truth.name = "truth";
    truth.compute_bytes = 4;
    truth.memory_bandwidth = 12e9, truth.peak_flops = 180e9;
    truth.launch_seconds = 3.5e-6, truth.row_seconds = 2e-6, truth.sync_seconds = 20e-6;
    const ModelShapes small2 = model_shapes(tiny_spec(2), 2), small6 = model_shapes(tiny_spec(6), 2);
    const ModelShapes large = load_model_shapes(samples() / "families" / "mixtral-8x7b" / "base" / "config.json");
    auto step = [&](const ModelShapes& m, std::int64_t sequences, std::int64_t tokens, std::int64_t context) {
      MeasuredStep s{&m, {}, 0, "step"};
      for (std::int64_t i = 0; i < sequences; ++i) s.work.chunks.push_back({tokens, context});
      s.work.emitted = sequences;
      s.work.expert_rows.assign(static_cast<std::size_t>(m.spec.num_layers), {});
      const std::int64_t pairs = sequences * tokens * m.spec.top_k, distinct = std::min(pairs, m.spec.num_experts);
      for (auto& layer : s.work.expert_rows)
        for (std::int64_t e = 0; e < distinct; ++e) layer.push_back(pairs / distinct + (e < pairs % distinct ? 1 : 0));
      s.seconds = price_step(m, truth, s.work).seconds();
      return s;
    };
    MeasuredSteps steps;
    for (const ModelShapes* m : {&small2, &small6})
      for (std::int64_t b : {1, 4, 16}) steps.overhead.push_back(step(*m, b, 1, 16)), steps.overhead.push_back(step(*m, b, 24, 24));
    steps.bandwidth.push_back(step(large, 1, 1, 16));
    steps.compute.push_back(step(large, 1, 2048, 2048));
    DeviceProfile start = truth;
    start.memory_bandwidth /= 3, start.peak_flops *= 3, start.launch_seconds = start.row_seconds = start.sync_seconds = 0;
    const DeviceProfile fitted = fit_device_profile(start, steps);
    auto near = [](double a, double b) { return std::abs(a / b - 1) < 1e-3; };
    QVERIFY2(near(fitted.memory_bandwidth, truth.memory_bandwidth), qPrintable(QString::number(fitted.memory_bandwidth)));
    QVERIFY2(near(fitted.peak_flops, truth.peak_flops), qPrintable(QString::number(fitted.peak_flops)));
    QVERIFY2(near(fitted.launch_seconds, truth.launch_seconds), qPrintable(QString::number(fitted.launch_seconds)));
    QVERIFY2(near(fitted.row_seconds, truth.row_seconds), qPrintable(QString::number(fitted.row_seconds)));
    QVERIFY2(near(fitted.sync_seconds, truth.sync_seconds), qPrintable(QString::number(fitted.sync_seconds)));
    // Too few kinds of steps, or large steps faster than the small ones' overhead: refused.
    QVERIFY_THROWS_EXCEPTION(InvalidArgument, fit_device_profile(start, MeasuredSteps{steps.overhead, {}, steps.compute}));
    MeasuredSteps disturbed = steps;
    disturbed.bandwidth[0].seconds = 1e-9;
    QVERIFY_THROWS_EXCEPTION(InvalidArgument, fit_device_profile(start, disturbed));
    // The profile measured on this project's CPU machine, and row_us, round-trip.
    const DeviceProfile cpu = load_device_profile(samples() / "devices" / "cpu-2core-measured.json");
    QCOMPARE(cpu.compute_bytes, std::size_t(4));
    QVERIFY(cpu.row_seconds > 0 && cpu.launch_seconds > 0);
    QCOMPARE(parse_device_profile(device_profile_json(cpu), "again.json").row_seconds, cpu.row_seconds);
    // The GPU machine's, measured there: bf16, its loads near the pinned copy rate that bench-device
    // measured beside them (the source names it), swaps from pinned memory as fast.
    const DeviceProfile h100 = load_device_profile(samples() / "devices" / "h100-measured.json");
    QCOMPARE(h100.compute_bytes, std::size_t(2));
    QVERIFY(h100.source.find("--device cuda") != std::string::npos);
    QVERIFY2(h100.h2d_pinned > 40e9 && h100.h2d_pinned < 64e9, qPrintable(QString::number(h100.h2d_pinned)));
  }
  void profiles_round_trip_and_refuse_bad_fields() {
    const DeviceProfile p = a100();
    QCOMPARE(p.compute_bytes, std::size_t(2));
    QVERIFY(p.h2d_pinned > p.h2d_pageable);
    const DeviceProfile again = parse_device_profile(device_profile_json(p), "again.json");
    QCOMPARE(again.name, p.name);
    QCOMPARE(again.h2d_pinned, p.h2d_pinned);
    QCOMPARE(again.launch_seconds, p.launch_seconds);
    QCOMPARE(again.memory_bandwidth, p.memory_bandwidth);
    QVERIFY(p.copy_setup_seconds > 0);
    QCOMPARE(again.copy_setup_seconds, p.copy_setup_seconds);

    auto json = nlohmann::json::parse(device_profile_json(p));
    auto refused = [&](nlohmann::json j, const char* expected) {
      try {
        parse_device_profile(j.dump(), "bad.json");
      } catch (const Error& e) {
        QVERIFY2(std::string(e.what()).find("bad.json") != std::string::npos, e.what());
        QVERIFY2(std::string(e.what()).find(expected) != std::string::npos, e.what());
        return;
      }
      QFAIL(qPrintable(QStringLiteral("accepted: ") + QString::fromStdString(j.dump())));
    };
    nlohmann::json j = json;
    j["h2d_pinned_gb_per_s"] = 0;
    refused(j, "h2d_pinned_gb_per_s");
    j = json;
    j["launch_us"] = -1;
    refused(j, "launch_us");
    j = json;
    j["copy_setup_us"] = "4 ms";
    refused(j, "copy_setup_us");
    j = json;
    j.erase("memory_gb_per_s");
    refused(j, "memory_gb_per_s");
    j = json;
    j["peak_tflop"] = 1;
    refused(j, "peak_tflops");  // a misspelt key names the nearest one
    j = json;
    j["compute_dtype"] = "int8";
    refused(j, "compute_dtype");
    j = json;
    j["schema"] = "mosaic.device/2";
    refused(j, "mosaic.device/1");
    refused(nlohmann::json::array(), "JSON object");
  }

  // Mixtral-8x7B from its config alone: 46.7 B parameters, as Mistral publishes; 336 MiB per expert.
  void shapes_come_from_the_config_alone() {
    const SimFamily f = mixtral();
    QCOMPARE(f.names(), (std::vector<std::string>{"base", "instruct"}));
    const ModelShapes& m = f.shapes;
    QCOMPARE(m.expert_bytes(), std::uint64_t(352321536));
    const double total = static_cast<double>(m.non_expert_params + 256 * m.expert_params);
    QVERIFY2(std::abs(total / 1e9 - 46.7) < 0.05, qPrintable(QString::number(total)));
    // On real checkpoints the shapes agree with the runtime's byte model to the byte.
    for (const char* arch : {"mixtral", "olmoe", "qwen2_moe"}) {
      Family family;
      open_family(family, {fixture(arch, "base"), fixture(arch, "ft1")});
      const DeviceBytes bytes = device_bytes(family);
      const ModelShapes s = load_model_shapes(fixture(arch, "base") / "config.json");
      QCOMPARE(s.expert_bytes(), bytes.per_expert);
      QCOMPARE(s.non_expert_bytes(), bytes.non_expert);
    }
    // Variants whose configs differ are not one family.
    const fs::path other = fs::path(tmp_.path().toStdString()) / "wider";
    fs::create_directories(other);
    auto cfg = nlohmann::json::parse(std::ifstream(samples() / "families" / "mixtral-8x7b" / "base" / "config.json"));
    cfg["num_hidden_layers"] = 16;
    std::ofstream(other / "config.json") << cfg.dump();
    QVERIFY_THROWS_EXCEPTION(MismatchError, load_sim_family({samples() / "families" / "mixtral-8x7b" / "base", other}));
  }

  // The profile was solved from Table 1's attention and two-hit expert block: priced back, a decode
  // step's layer costs their sum, 0.72 + 1.2 ms, and a MIG slice's attention about the 0.78 ms measured.
  void the_cost_model_rebuilds_table_1() {
    const ModelShapes m = mixtral().shapes;
    const DeviceProfile d = a100();
    StepWork w;
    w.chunks = {{1, 20}};
    w.emitted = 1;
    w.expert_rows.assign(32, {1, 1});
    const StepCost c = price_step(m, d, w);
    const double head = static_cast<double>(m.head_params) * 2 / d.memory_bandwidth + d.launch_seconds;
    const double per_layer = (c.seconds() - head - d.sync_seconds) / 32;
    QVERIFY2(std::abs(per_layer - 1.92e-3) < 0.05e-3, qPrintable(QString::number(per_layer * 1e3) + QStringLiteral(" ms per layer")));
    // A slice at half the device: the bytes take twice as long, the launches do not.
    QVERIFY(c.seconds(2) > c.seconds() * 1.3 && c.seconds(2) < c.seconds() * 2);
    // A miss: 27.8 ms per expert on the whole link and 51.3 ms on half of it, both as measured.
    QVERIFY(std::abs(copy_seconds(m.expert_bytes(), d.h2d_pinned, 1, d.copy_setup_seconds) - 27.8e-3) < 0.05e-3);
    QVERIFY(std::abs(copy_seconds(m.expert_bytes(), d.h2d_pinned, 2, d.copy_setup_seconds) - 51.3e-3) < 0.05e-3);
    // A prefill reads each weight once however many rows it has: 20 rows cost far less than 20 steps.
    StepWork prefill = w;
    prefill.chunks = {{20, 20}};
    QVERIFY(price_step(m, d, prefill).seconds() < 2 * c.seconds());
  }

  // Table 1 as the report shows it, from a simulated run: requests decoding alone, offloaded to 107
  // of Mixtral's 256 experts, have each MoE layer's attention and expert block priced by the hits
  // among its top-2: the paper's 0.72 ms, and 1.2 ms plus 27.8 ms per miss (its 1.2 / 29.2 / 56.8).
  // A MIG slice (half the link, half the device) pays 51.3 ms per miss, as the paper measured, and
  // computes slower.
  void table_1_comes_from_steps_run_alone() {
    const SimFamily f = mixtral();
    const DeviceProfile d = a100();
    const auto workload = alternating(10, 200, f.names());
    auto table = [](const std::vector<RequestRecord>& records) {
      std::vector<LayerTime> t(3);
      for (const auto& r : records)
        for (const LayerCounts& c : r.stats.counters.layers) {
          if (c.alone.size() > t.size()) return std::vector<LayerTime>{};  // more hits than top-k: wrong
          add_times(t, c.alone);
        }
      return t;
    };
    auto attention = [](const std::vector<LayerTime>& t) {
      double s = 0, n = 0;
      for (const LayerTime& x : t) s += x.attention_seconds, n += static_cast<double>(x.steps);
      return s / n;
    };
    auto experts = [](const LayerTime& x) { return x.expert_seconds / static_cast<double>(x.steps); };
    const auto single = table(simulate_workload(strategy(StrategyKind::Single, 107), *sim_store(f), d, {}, workload, 3));
    QCOMPARE(single.size(), std::size_t(3));
    QCOMPARE(single[0].steps + single[1].steps + single[2].steps, std::int64_t(10 * 24 * 32));  // every decode step, every layer
    const double miss = copy_seconds(f.shapes.expert_bytes(), d.h2d_pinned, 1, d.copy_setup_seconds);
    QVERIFY2(std::abs(attention(single) - 0.72e-3) < 0.05e-3, qPrintable(QString::number(attention(single) * 1e3)));
    QVERIFY2(std::abs(experts(single[2]) - 1.2e-3) < 0.1e-3, qPrintable(QString::number(experts(single[2]) * 1e3)));
    QVERIFY(std::abs(experts(single[1]) - experts(single[2]) - miss) < 1e-9);
    QVERIFY(std::abs(experts(single[0]) - experts(single[2]) - 2 * miss) < 1e-9);

    StrategyConfig mig = strategy(StrategyKind::SpaceSharing, 214);
    mig.budget_bytes = std::uint64_t{80} << 30;
    const auto sliced = table(simulate_workload(mig, *sim_store(f), d, {}, workload, 3));
    QCOMPARE(sliced.size(), std::size_t(3));
    QVERIFY(attention(sliced) > attention(single) && attention(sliced) < 2 * attention(single));
    QVERIFY(experts(sliced[2]) > experts(single[2]));
    const double sliced_miss = copy_seconds(f.shapes.expert_bytes(), d.h2d_pinned, 2, d.copy_setup_seconds);
    QVERIFY(sliced_miss > 1.5 * miss && sliced_miss < 2 * miss);  // the bytes share the link, each load's setup does not
    QVERIFY(std::abs(experts(sliced[0]) - experts(sliced[2]) - 2 * sliced_miss) < 1e-9);
  }

  // Look-ahead swaps at the paper's scale: a base request decoding, an instruct one arriving. Plain
  // swapping stalls the base's decode for the instruct's whole swap; filled ahead into the second set
  // buffer, the swap runs behind the base's steps (on the link when their expert loads leave it
  // free), the instruct request waits only for what is left, and the base request never waits.
  void look_ahead_swaps_hide_behind_decoding() {
    const SimFamily f = mixtral();
    const DeviceProfile d = a100();
    const HostMemory paper{.experts_pinned = true, .non_expert_pinned = false};
    const std::vector<WorkloadRequest> w{{0, f.names()[0], std::vector<std::int64_t>(20, 7), 200},
                                         {0.5, f.names()[1], std::vector<std::int64_t>(20, 7), 25}};
    auto run = [&](bool ahead, std::int64_t max_sequences = 8) {
      StrategyConfig c = strategy(StrategyKind::Consolidated, 229);
      c.resident_sets = 2;
      c.scheduler.max_sequences = max_sequences;
      c.scheduler.swap_ahead = ahead;
      return simulate_workload(c, *sim_store(f), d, paper, w, 1);
    };
    const auto plain = run(false), ahead = run(true);
    const double swap = copy_seconds(f.shapes.non_expert_bytes(), d.h2d_pageable, 1, d.copy_setup_seconds);
    QCOMPARE(plain[1].stats.counters.swaps, std::int64_t(1));
    QVERIFY(std::abs(plain[1].stats.counters.swap_seconds - swap) < 1e-9);
    QCOMPARE(ahead[1].stats.counters.swaps, std::int64_t(1));
    QVERIFY2(ahead[1].stats.counters.swap_seconds < 0.5 * swap, qPrintable(QString::number(ahead[1].stats.counters.swap_seconds)));
    QVERIFY(ahead[1].stats.start >= w[1].arrival + swap - ahead[1].stats.counters.swap_seconds);  // it joined once its set was in
    const double saved = plain[0].stats.finish - ahead[0].stats.finish;
    QVERIFY2(saved > 0.5 * swap, qPrintable(QStringLiteral("%1 s of a %2 s swap").arg(saved).arg(swap)));
    QCOMPARE(ahead[0].stats.counters.swaps, std::int64_t(0));  // warm from the start, as a deployment is
    // One request at a time, as the paper served them: the instruct request's set is in by the time
    // the base request finishes, so its swap costs it nothing and its TTFT shrinks by the swap.
    const auto plain1 = run(false, 1), ahead1 = run(true, 1);
    QCOMPARE(ahead1[1].stats.counters.swaps, std::int64_t(1));
    QCOMPARE(ahead1[1].stats.counters.swap_seconds, 0.0);
    const double ttft_saved = plain1[1].stats.ttft() - ahead1[1].stats.ttft();
    QVERIFY2(std::abs(ttft_saved - swap) < 1e-6, qPrintable(QStringLiteral("%1 s of a %2 s swap").arg(ttft_saved).arg(swap)));
  }

  // Served one at a time at low load: every request pays one prefill and 24 decode steps; the
  // consolidated runtime swaps exactly when the variant changes, at the pageable link's rate.
  void swaps_happen_when_the_variant_changes() {
    const SimFamily f = mixtral();
    const DeviceProfile d = a100();
    const HostMemory paper{.experts_pinned = true, .non_expert_pinned = false};
    const auto workload = alternating(12, 100, f.names(), 3);  // base ×3, instruct ×3, …
    const auto single = simulate_workload(strategy(StrategyKind::Single, 229), *sim_store(f), d, paper, workload, 1);
    const auto consolidated = simulate_workload(strategy(StrategyKind::Consolidated, 229), *sim_store(f), d, paper, workload, 1);
    std::int64_t swaps = 0;
    for (const auto& r : single) QCOMPARE(r.stats.counters.swaps, std::int64_t(0));
    for (std::size_t i = 0; i < consolidated.size(); ++i) {
      swaps += consolidated[i].stats.counters.swaps;
      // Same routing, same hits: the two differ by the swap alone.
      QCOMPARE(consolidated[i].stats.counters.total().misses, single[i].stats.counters.total().misses);
      const double swap = copy_seconds(f.shapes.non_expert_bytes(), d.h2d_pageable, 1, d.copy_setup_seconds);
      const double extra = consolidated[i].stats.ttft() - single[i].stats.ttft();
      QVERIFY2(std::abs(extra - consolidated[i].stats.counters.swap_seconds) < 1e-9, qPrintable(QString::number(extra)));
      QCOMPARE(consolidated[i].stats.counters.swaps, std::int64_t(i > 0 && i % 3 == 0 ? 1 : 0));  // the first starts warm
      if (consolidated[i].stats.counters.swaps) QVERIFY(std::abs(consolidated[i].stats.counters.swap_seconds - swap) < 1e-6);
      QCOMPARE(single[i].stats.generated_tokens, std::int64_t(25));
      QVERIFY(single[i].stats.queue_wait() == 0);
    }
    QCOMPARE(swaps, std::int64_t(3));
    // Deterministic: the same workload and seed give the same records.
    const auto again = simulate_workload(strategy(StrategyKind::Single, 229), *sim_store(f), d, paper, workload, 1);
    for (std::size_t i = 0; i < again.size(); ++i) QCOMPARE(again[i].stats.finish, single[i].stats.finish);
  }

  // Uniform routing hits as often as the layout keeps positions; every expert resident, always.
  void hits_follow_what_is_resident() {
    const SimFamily f = mixtral();
    const DeviceProfile d = a100();
    const auto workload = alternating(40, 100, f.names());
    for (std::int64_t capacity : {64, 128, 229}) {
      const auto records = simulate_workload(strategy(StrategyKind::Single, capacity), *sim_store(f), d, {}, workload, 3);
      const double hit = summarize(records).hit_rate, expected = static_cast<double>(capacity) / 256;
      QVERIFY2(std::abs(hit - expected) < 0.02, qPrintable(QString::number(hit) + QStringLiteral(" vs ") + QString::number(expected)));
    }
    const auto resident = simulate_workload(strategy(StrategyKind::SingleResident), *sim_store(f), d, {}, workload, 3);
    QCOMPARE(summarize(resident).hit_rate, 1.0);
    QCOMPARE(summarize(resident).load_bytes, std::uint64_t(0));
  }

  // MIG: each slice serves its variant with half the budget, link and device; a request takes longer
  // on a slice than on the whole device with the same experts resident.
  void space_sharing_slices_the_device() {
    const SimFamily f = mixtral();
    const DeviceProfile d = a100();
    StrategyConfig mig = strategy(StrategyKind::SpaceSharing, 214);
    mig.budget_bytes = std::uint64_t{80} << 30;
    const auto store = sim_store(f);
    auto device = [&] { return std::make_shared<SimulatedDevice>(SimulatedDevice{d, {}, drawn_routes(0, 1, 8, 2)}); };
    const Deployment parts(mig, *store, device());
    QCOMPARE(parts.partitions().size(), std::size_t(2));
    QCOMPARE(parts.partitions()[1].serves, std::vector<std::string>{f.names()[1]});
    QCOMPARE(parts.partitions()[1].runtime->config().copy_slowdown, 2.0);
    const auto workload = alternating(20, 200, f.names());
    const auto sliced = simulate_workload(mig, *store, d, {}, workload, 5);
    for (const auto& r : sliced) QCOMPARE(r.lane, std::size_t(r.target == "base" ? 0 : 1));
    const auto whole = simulate_workload(strategy(StrategyKind::Single, 107), *sim_store(f), d, {}, workload, 5);
    QVERIFY(mean_of(sliced, &RequestStats::turnaround) > 1.8 * mean_of(whole, &RequestStats::turnaround));
    // One expert more per slice than 40 GiB holds is refused, saying how many fit.
    mig.capacity = 216;
    try {
      Deployment(mig, *store, device());
      QFAIL("a budget too small was accepted");
    } catch (const BudgetError& e) {
      QVERIFY2(std::string(e.what()).find("it holds 107 experts") != std::string::npos, e.what());
    }
    QVERIFY_THROWS_EXCEPTION(InvalidArgument, Deployment(strategy(StrategyKind::Esft), *store, device()));  // no adapters here
    // Prefetching predicts a layer's experts from the layer before's input, which the routing model does not link.
    StrategyConfig ahead = strategy(StrategyKind::Single, 107);
    ahead.miss = "prefetch";
    const std::string why = error_of<UnsupportedError>([&] { Deployment(ahead, *store, device()); });
    expect_mentions(why, {"miss 'prefetch'", "is not simulated", "simulate lru"});
  }

  // A family of adapters and delta folders from their config files alone: an adapter holds only
  // what it tunes (its set is its base's unless it tunes shared experts), a delta folder its own
  // non-expert set and a packed delta at every expert over the base's; what they are built on is
  // resolved as when serving, and a base that is missing or itself built on one is refused.
  void adapters_and_delta_folders_are_described_by_their_configs() {
    const fs::path root = fs::path(tmp_.path().toStdString()) / "dsl";
    const SimFamily f = load_sim_family(deepseek_lite_family(root));
    QCOMPARE(f.names(), (std::vector<std::string>{"base", "law", "chat-delta", "code"}));
    const auto store = sim_store(f);
    const ModelSpec& s = store->spec();
    const int base = 0, law = 1, delta = 2, code = 3;
    QCOMPARE(store->base_of(law), base);
    QCOMPARE(store->base_of(code), base);
    QCOMPARE(store->base_of(delta), base);
    QVERIFY(store->is_adapter(law) && store->is_delta(delta) && !store->is_adapter(base));
    QCOMPARE(store->tuned(law), (std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 0}, {1, 5}, {2, 3}}));
    QCOMPARE(store->set_of(law), store->set_of(base));
    QVERIFY(store->set_of(code) != store->set_of(base) && store->set_of(delta) != store->set_of(base));
    QCOMPARE(store->sets(), 3);
    QVERIFY(store->expert(law, 1, 0) != store->expert(base, 1, 0));
    QCOMPARE(store->expert(law, 1, 1), store->expert(base, 1, 1));
    QVERIFY(store->source(law, 2, 3) == ExpertSource::adapter(law, 3));
    QVERIFY(store->source(law, 2, 4) == ExpertSource::full(base, 4));
    QCOMPARE(store->expert(law, 0, 0), ExpertId(-1));  // layer 0 is dense
    // The delta: the base's tensors and dense expert, and a pack of 4-bit 2:4 codes.
    const HostExpert& d = store->expert_tensors(store->expert(delta, 3, 9));
    const HostExpert& b = store->expert_tensors(store->expert(base, 3, 9));
    QVERIFY(d.delta >= 0 && d.gate == b.gate && d.down == b.down);
    QCOMPARE(d.dense, store->expert(base, 3, 9));
    QVERIFY(store->source(delta, 3, 9) == ExpertSource::delta(delta, 9));
    const DeltaFormat format = store->delta(d.delta).format;
    const std::uint64_t delta_bytes = 2 * packed_bytes(format, s.expert_intermediate, s.hidden_size) + packed_bytes(format, s.hidden_size, s.expert_intermediate);
    QCOMPARE(store->delta(d.delta).bytes(), delta_bytes);
    QCOMPARE(store->max_delta_bytes(), delta_bytes);
    QVERIFY(delta_bytes * 4 < store->expert_bytes());  // 4-bit codes and 2-bit places of half the values, against 16 bits of all
    // The code adapter's set differs from the base's at the shared experts only.
    std::uint64_t shared_bytes = 0;
    for (std::size_t i = 0; i < store->non_expert_names().size(); ++i) {
      const TensorId a = store->set_tensors(store->set_of(code))[i], c = store->set_tensors(store->set_of(base))[i];
      if (a == c) continue;
      QVERIFY2(store->non_expert_names()[i].find("shared_experts") != std::string::npos, store->non_expert_names()[i].c_str());
      shared_bytes += store->tensor(a).size_bytes();
    }
    QCOMPARE(shared_bytes, std::uint64_t(26 * 3 * 2 * 2048 * 1408 * 2));  // 26 MoE layers, 2 shared experts of 1408 each, bf16
    const std::uint64_t positions = 26 * 64, e = store->expert_bytes();
    QCOMPARE(store->host_bytes(), 2 * store->non_expert_bytes() + positions * (e + delta_bytes) + 4 * e + shared_bytes);

    // Refused: an adapter with no base before it or named, a base_model that is no folder, a base built on a base.
    const std::string alone = error_of<MissingError>([&] { load_sim_family({root / "law"}); });
    expect_mentions(alone, {"expert_cfg.json", "base_model", "list the base before the adapter"});
    std::ofstream(root / "chat-delta" / "delta.json")
        << "{\"schema\": \"mosaic.delta/1\", \"base_model\": \"../nowhere\", \"base_sha256\": \"" << std::string(64, '0') << "\", \"bits\": 4, \"sparsity\": \"2:4\", \"group\": 128}";
    expect_mentions(error_of<MissingError>([&] { load_sim_family({root / "chat-delta"}); }), {"delta.json", "base_model", "not a folder"});
    std::ofstream(root / "chat-delta" / "delta.json")
        << "{\"schema\": \"mosaic.delta/1\", \"base_model\": \"../code\", \"base_sha256\": \"" << std::string(64, '0') << "\", \"bits\": 4, \"sparsity\": \"2:4\", \"group\": 128}";
    expect_mentions(error_of<UnsupportedError>([&] { load_sim_family({root / "base", root / "chat-delta"}); }), {"delta.json", "itself built on a base"});
    QVERIFY_THROWS_EXCEPTION(InvalidArgument, HostStore::of_configs(s, DType::BF16, std::vector<ConfigTarget>{{.name = "a", .base = 0, .delta = format}}));
  }

  // ExpertWeave and DeltaMoE on the simulated clock. esft serves its adapters over one pinned base:
  // every pair a hit, no load, and a change of adapter swaps only what differs from the set held (the
  // code adapter's shared experts), where time-sharing swaps the tuned experts too. Under a budget that holds
  // the base and half the deltas, delta loads the rest on a miss, and hybrid loads nothing (a row
  // whose delta is not resident takes the base's copy).
  void adapters_and_deltas_are_served_on_the_simulated_clock() {
    const SimFamily f = load_sim_family(deepseek_lite_family(fs::path(tmp_.path().toStdString()) / "served"));
    const auto store = sim_store(f);
    const DeviceProfile d = a100();
    const auto workload = alternating(8, 100, {"law", "code"});
    const auto esft = simulate_workload(strategy(StrategyKind::Esft), *store, d, {}, workload, 1);
    QCOMPARE(esft.size(), workload.size());
    std::uint64_t shared_bytes = 0;
    for (std::size_t i = 0; i < store->non_expert_names().size(); ++i)
      if (const TensorId t = store->set_tensors(store->set_of(3))[i]; t != store->set_tensors(store->set_of(0))[i]) shared_bytes += store->tensor(t).size_bytes();
    for (std::size_t i = 0; i < esft.size(); ++i) {
      const LayerCounts t = esft[i].stats.counters.total();
      QVERIFY(t.hits > 0 && t.misses == 0 && t.loads == 0);
      if (i > 0) QCOMPARE(esft[i].stats.counters.swap_bytes, shared_bytes);  // the shared experts, either way
    }
    const auto whole = simulate_workload(strategy(StrategyKind::TimeSharing), *store, d, {}, workload, 1);
    // Time-sharing swaps what differs between the two models: the shared experts and the four tuned
    // experts (law's three, code's one), which esft holds pinned side by side.
    QCOMPARE(whole.back().stats.counters.swap_bytes, shared_bytes + 4 * store->expert_bytes());
    QVERIFY(mean_of(whole, &RequestStats::turnaround) > mean_of(esft, &RequestStats::turnaround));

    // A budget of one non-expert set, the base's experts, the reserve and half the deltas.
    StrategyConfig half = strategy(StrategyKind::Delta);
    std::uint64_t reserved = 0;
    for (const ReserveItem& r : plan_reserve(store->spec(), store->expert_bytes(), half.reserve)) reserved += r.bytes;
    const std::uint64_t positions = 26 * 64;
    half.budget_bytes = store->non_expert_bytes() + positions * store->expert_bytes() + reserved + positions / 2 * store->max_delta_bytes();
    const auto chats = alternating(4, 100, {"chat-delta"});
    const auto delta = simulate_workload(half, *store, d, {}, chats, 1);
    half.kind = StrategyKind::Hybrid;
    const auto hybrid = simulate_workload(half, *store, d, {}, chats, 1);
    std::int64_t delta_loads = 0, delta_hits = 0, hybrid_loads = 0, hybrid_hits = 0, pairs = 0;
    for (std::size_t i = 0; i < chats.size(); ++i) {
      const LayerCounts a = delta[i].stats.counters.total(), h = hybrid[i].stats.counters.total();
      delta_loads += a.loads, delta_hits += a.hits, hybrid_loads += h.loads, hybrid_hits += h.hits;
      pairs += (delta[i].stats.prompt_tokens + delta[i].stats.generated_tokens - 1) * 26 * 6;
      QCOMPARE(delta[i].stats.prompt_tokens + delta[i].stats.generated_tokens, hybrid[i].stats.prompt_tokens + hybrid[i].stats.generated_tokens);
    }
    QCOMPARE(hybrid_loads, std::int64_t(0));
    QCOMPARE(hybrid_hits, pairs);
    QVERIFY2(delta_loads > 0 && delta_hits > 0 && delta_hits < pairs, (std::to_string(delta_loads) + " loads, " + std::to_string(delta_hits) + " hits").c_str());
    QVERIFY(mean_of(delta, &RequestStats::turnaround) > mean_of(hybrid, &RequestStats::turnaround));

    // Every delta pinned: a decode step reads each routed expert's base once and its packed delta
    // (a fifth of its bytes) beside it, so a delta folder decodes a little slower than its base, by
    // the bytes alone on a device whose launches cost nothing (the paper's PyTorch launches, 45 µs
    // each, would add a delta's own kernels' worth).
    DeviceProfile lean = d;
    lean.launch_seconds = 0;
    const auto all_deltas = simulate_workload(strategy(StrategyKind::Delta), *store, lean, {}, chats, 1);
    const auto base = simulate_workload(strategy(StrategyKind::SingleResident), *store, lean, {}, alternating(4, 100, {"base"}), 1);
    const double slower = mean_of(all_deltas, &RequestStats::tpot) / mean_of(base, &RequestStats::tpot);
    QVERIFY2(slower > 1.02 && slower < 1.25, std::to_string(slower).c_str());
    QCOMPARE(all_deltas.front().stats.counters.total().loads, std::int64_t(0));
  }

  // Every strategy of the sample ESFT sweep runs on the simulated clock, over the adapters' configs.
  void the_esft_sweep_runs_on_the_simulated_clock() {
    SweepConfig config = load_sweep_config(samples() / "esft-skew.json");
    nlohmann::json j = nlohmann::json::parse(config.text);
    j["clock"] = "simulated";
    j["device_profile"] = "devices/a100-pcie4-paper.json";
    j["duration_seconds"] = 2;
    config = parse_sweep_config(j.dump(), "esft-simulated.json", samples());
    std::map<std::string, std::size_t> served;
    SweepEvents events;
    events.run_finished = [&](const SweepRun& run, const std::vector<RequestRecord>& records, const RunSummary&, bool) {
      served[run.strategy] += records.size();
      for (const RequestRecord& r : records) QVERIFY(r.target.starts_with("esft-") && r.stats.generated_tokens == 25);
    };
    const Outcome<> done = simulate_sweep(config, load_sim_family(config.variants), load_device_profile(config.device_profile), events);
    QVERIFY2(done.ok(), done.error_message().c_str());
    QCOMPARE(served.size(), config.strategies.size());
    for (const auto& [name, n] : served) QVERIFY2(n > 10, name.c_str());

    // At DeepSeek-V2-Lite's size, adapters in DeepSeek's spelling: esft holds base and tuned experts
    // (every pair a hit, no swap); time-sharing swaps each adapter's tuned experts in.
    config = load_sweep_config(samples() / "esft-deepseek-lite-simulated.json");
    j = nlohmann::json::parse(config.text);
    j["rates"] = {0.5};
    j["duration_seconds"] = 10;
    config = parse_sweep_config(j.dump(), "esft-deepseek-lite.json", samples());
    std::map<std::string, LayerCounts> counts;
    std::map<std::string, std::uint64_t> swapped;
    events.run_finished = [&](const SweepRun& run, const std::vector<RequestRecord>& records, const RunSummary&, bool) {
      QVERIFY(!records.empty());
      for (const RequestRecord& r : records) {
        counts[run.strategy] += r.stats.counters.total();
        swapped[run.strategy] += r.stats.counters.swap_bytes;
      }
    };
    QVERIFY(simulate_sweep(config, load_sim_family(config.variants), load_device_profile(config.device_profile), events).ok());
    QVERIFY(counts.at("esft").hits > 0 && counts.at("esft").misses == 0);
    QCOMPARE(swapped.at("esft"), std::uint64_t(0));
    QVERIFY(swapped.at("time-sharing") > 0);
    // Adapters share their base's non-expert set, so 80 GiB keeps room for that one set and holds a
    // copy at every position: one copy serves every adapter's rows there, nothing loads or swaps.
    QVERIFY(counts.at("consolidated").hits > 0 && counts.at("consolidated").misses == 0);
    QCOMPARE(swapped.at("consolidated"), std::uint64_t(0));
  }

  // SwapMoE on the simulated clock: importance from each token's unmasked draw, the router masked to
  // the resident sets, and the updates' copies carried by the device's link behind the steps: they
  // take steps to land, move the bytes of the experts they swap in, and slow no step.
  void virtual_experts_update_behind_the_steps_on_the_simulated_clock() {
    const SimFamily f = mixtral();
    const auto store = sim_store(f);
    const DeviceProfile d = a100();
    StrategyConfig v = strategy(StrategyKind::VirtualExperts, 2 * 32 * 4);  // 4 of 8 experts per layer and variant
    v.updates.update_every = 4;
    v.updates.staging = 1;
    const auto workload = alternating(4, 100, f.names());
    auto serve = [&](const StrategyConfig& c, VirtualStats* stats) {
      const Deployment deployment(c, *store, std::make_shared<SimulatedDevice>(SimulatedDevice{d, {}, drawn_routes(0.3, 7, 8, 2)}));
      const auto records = run_workload(deployment, workload, {.clock = RunClock::Simulated});
      if (stats) *stats = deployment.partitions()[0].runtime->virtual_experts()->stats();
      return records;
    };
    VirtualStats stats;
    const auto updating = serve(v, &stats);
    QVERIFY2(stats.updates > 0 && stats.swapped >= stats.updates, std::to_string(stats.updates).c_str());
    QCOMPARE(stats.bytes, static_cast<std::uint64_t>(stats.swapped) * store->expert_bytes());
    QVERIFY(stats.steps_overlapped > 0);  // 28 ms of link per Mixtral expert: longer than a decode step
    QVERIFY(stats.copy_seconds > 0);
    for (const RequestRecord& r : updating) {
      const LayerCounts t = r.stats.counters.total();
      QCOMPARE(t.loads, std::int64_t(0));  // masked: never a miss
      QCOMPARE(t.misses, std::int64_t(0));
    }
    v.updates.staging = 0;  // the same sets, never updated
    const auto fixed = serve(v, nullptr);
    const double ratio = mean_of(updating, &RequestStats::tpot) / mean_of(fixed, &RequestStats::tpot);
    QVERIFY2(ratio > 0.95 && ratio < 1.05, std::to_string(ratio).c_str());
    v.calibration = "calibration.txt";
    expect_mentions(error_of<UnsupportedError>([&] { serve(v, nullptr); }), {"calibration", "is not simulated", "uniform counts"});
  }

  // The layout of a family too large to open, from its config.json files alone: the budget's
  // capacity as the planner prices it (80 GiB holds 229 of Mixtral-8x7B's 256 experts beside one
  // non-expert set and the reserve), spread evenly over the layers, turns by the policy; what needs
  // the weights (medoid) or a budget it cannot hold is refused, saying why.
  void a_layout_is_planned_from_configs_alone() {
    const SimFamily f = mixtral();
    const ConfigLayout l = plan_config_layout(f, std::uint64_t{80} << 30, Policy::RoundRobin);
    QCOMPARE(l.capacity.positions, std::int64_t(256));
    QCOMPARE(l.plan.capacity, std::int64_t(229));
    QCOMPARE(l.capacity.bytes_per_expert, f.shapes.expert_bytes());
    std::vector<int> per_layer(32, 0);
    for (std::int64_t p = 0; p < 256; ++p)
      if (l.plan.map[static_cast<std::size_t>(p)] >= 0) ++per_layer[static_cast<std::size_t>(p / 8)];
    QVERIFY(*std::max_element(per_layer.begin(), per_layer.end()) - *std::min_element(per_layer.begin(), per_layer.end()) <= 1);
    const auto counts = l.plan.resident_counts();
    QCOMPARE(counts[0] + counts[1], std::int64_t(229));
    QVERIFY(std::abs(counts[0] - counts[1]) <= 1);  // round-robin turns
    for (double d : l.plan.distance) QVERIFY(std::isnan(d));  // none measured
    const std::vector<double> shares{3, 1};
    const auto w = plan_config_layout(f, std::uint64_t{80} << 30, Policy::Weighted, {}, shares).plan.resident_counts();
    QVERIFY(w[0] > 2 * w[1]);
    QVERIFY_THROWS_EXCEPTION(InvalidArgument, plan_config_layout(f, std::uint64_t{80} << 30, Policy::Medoid));
    try {
      plan_config_layout(f, std::uint64_t{2} << 30, Policy::RoundRobin);
      QFAIL("2 GiB was accepted for Mixtral-8x7B");
    } catch (const BudgetError& e) {
      QVERIFY2(std::string(e.what()).find("minimum") != std::string::npos, e.what());
    }
  }

  // Rates from measured service (difference 6): each strategy's burst measures its saturation rate,
  // the grid runs from a quarter of the slowest's to twice the fastest's, and each strategy's sweep
  // starts below its saturation and ends past it (throughput stops following the rate: its ridge),
  // stopping at the first rate at twice its own. The burst's rate is where the ridge is.
  void rates_from_saturation_cross_each_strategys_ridge() {
    SweepConfig config = load_sweep_config(samples() / "paper-qos-simulated.json");
    auto j = nlohmann::json::parse(config.text);
    j["rates"] = {{"saturation", {{"points", 7}}}};
    j["repeats"] = 1;
    j["duration_seconds"] = 2;
    // Consolidated as the paper runs it (one set, arrival order): the two ridges far apart.
    j["strategies"] = {{{"kind", "single-resident"}}, {{"kind", "consolidated"}, {"capacity", 12}, {"admission", "fcfs"}, {"resident_sets", 1}}};
    config = parse_sweep_config(j.dump(), "ridge.json", samples());
    QVERIFY(config.saturation && config.rates.empty());
    std::vector<SaturationProbe> probes;
    std::vector<double> grid;
    std::map<std::string, std::vector<std::pair<double, RunSummary>>> runs;
    SweepEvents events;
    events.rates_chosen = [&](const std::vector<SaturationProbe>& p, const std::vector<double>& r) { probes = p, grid = r; };
    events.run_finished = [&](const SweepRun& run, const std::vector<RequestRecord>&, const RunSummary& s, bool) {
      runs[run.strategy].push_back({run.rate, s});
      QVERIFY(nlohmann::json::parse(run.config_json)["saturation"].size() == 2);  // recorded with every run
    };
    QVERIFY(simulate_sweep(config, load_sim_family(config.variants), load_device_profile(config.device_profile), events).ok());
    QCOMPARE(probes.size(), std::size_t(2));
    QCOMPARE(grid.size(), std::size_t(7));
    const double slowest = std::min(probes[0].rate_per_s, probes[1].rate_per_s), fastest = std::max(probes[0].rate_per_s, probes[1].rate_per_s);
    QVERIFY2(fastest > 3 * slowest, "single-resident serves far more than consolidated, which swaps");
    QVERIFY(std::abs(grid.front() / (0.25 * slowest) - 1) < 0.01 && std::abs(grid.back() / (2 * fastest) - 1) < 0.01);
    for (std::size_t i = 1; i < grid.size(); ++i) QVERIFY(grid[i] > grid[i - 1]);
    for (const SaturationProbe& p : probes) {
      const auto& r = runs.at(p.strategy);
      QVERIFY2(r.size() >= 3, p.strategy.c_str());
      QVERIFY2(r.back().first >= 2 * 0.995 * p.rate_per_s && r[r.size() - 2].first < 2 * 0.995 * p.rate_per_s, p.strategy.c_str());  // 3 digits
      auto served = [](const RunSummary& s) { return static_cast<double>(s.completed_in_window) / static_cast<double>(s.requests); };
      QVERIFY2(served(r.front().second) > 0.9, p.strategy.c_str());  // below saturation: throughput follows the arrivals
      QVERIFY2(served(r.back().second) < 0.6, p.strategy.c_str());   // past it: it does not
      const double high = r.back().second.requests_per_minute / 60;
      QVERIFY2(std::abs(high / p.rate_per_s - 1) < 0.25, (p.strategy + ": the ridge is at " + std::to_string(high) + " req/s, the burst said " +
                                                     std::to_string(p.rate_per_s)).c_str());
    }
    // Malformed: a trace with measured rates, bounds reversed, an unknown key.
    auto refused = [&](nlohmann::json bad, const char* expected) {
      try {
        parse_sweep_config(bad.dump(), "ridge.json", samples());
      } catch (const FormatError& e) {
        QVERIFY2(std::string(e.what()).find(expected) != std::string::npos, e.what());
        return;
      }
      QFAIL("accepted");
    };
    auto b = j;
    b["trace"] = "trace.jsonl";
    refused(b, "a trace replays its own arrivals");
    b = j;
    b["rates"]["saturation"]["from"] = 3;
    refused(b, "rates.saturation.to");
    b = j;
    b["rates"]["saturation"]["step"] = 3;
    refused(b, "step");
    b = j;
    b["rates"] = {{"fixed", 3}};
    refused(b, "field 'rates'");
    b = j;
    b["duration_seconds"] = 0;
    refused(b, "arrival window");
  }

  // The sample sweep end to end: parsed, simulated and recorded as served runs are.
  // The sample family's trained router, on its held-out text: a prompt touches fewer experts than
  // uniform routing would, every layer within [top_k, experts], and the model fitted at 20 tokens
  // predicts the count at 10 and 40 (its shape fits, not only its one parameter).
  void routing_is_measured_on_real_text() {
    const fs::path family = fs::path(MOSAIC_RESOURCES) / "sample-family";
    const auto model = Model::load(Checkpoint(family / "base"));
    const Tokenizer tokenizer = Tokenizer::load(family / "base" / "tokenizer.json");
    const auto ids = tokenizer.encode(read_text_file(family / "heldout" / "c-headers.txt", ""), false);
    const RoutingMeasurement m = measure_routing(*model, ids, 20, 64);
    QCOMPARE(m.windows, std::int64_t(64));
    QCOMPARE(m.layers.size(), std::size_t(4));
    for (double d : m.distinct) QVERIFY2(d >= 2 && d <= 8, qPrintable(QString::number(d)));
    const double uniform = expected_distinct(0, 20, 8, 2);
    QVERIFY2(m.mean() < uniform - 0.3, qPrintable(QStringLiteral("%1 against uniform %2").arg(m.mean()).arg(uniform)));
    const double a = fit_concentration(m.mean(), 20, 8, 2);
    QVERIFY(a > 0);
    for (std::int64_t tokens : {10, 40}) {
      const double measured = measure_routing(*model, ids, tokens, 64).mean(), predicted = expected_distinct(a, tokens, 8, 2);
      QVERIFY2(std::abs(measured - predicted) < 0.3, qPrintable(QStringLiteral("%1 tokens: measured %2, model %3").arg(tokens).arg(measured).arg(predicted)));
    }
    // Neighbours share an expert more often than uniform routing's 1 − C(6,2)/C(8,2), and more often
    // than any two tokens of a prompt: a model fitted to the neighbours' overlap touches fewer experts
    // than the router does (the bound a published overlap gives, sim/routing_model.h).
    QCOMPARE(m.overlap.size(), std::size_t(4));
    QVERIFY2(m.mean_overlap() > expected_overlap(0, 8, 2) + 0.05, qPrintable(QString::number(m.mean_overlap())));
    const double bound = expected_distinct(fit_concentration_to_overlap(m.mean_overlap(), 8, 2), 20, 8, 2);
    QVERIFY2(bound < m.mean(), qPrintable(QStringLiteral("fitted to neighbours %1, measured %2").arg(bound).arg(m.mean())));
    const RoutingMeasurement again = measure_routing(*model, ids, 20, 64);  // deterministic
    QCOMPARE(again.distinct, m.distinct);
    QCOMPARE(again.overlap, m.overlap);
    // The neighbour count itself, on routes written by hand: 4 tokens over 3 experts, top-1.
    //   token 0 → 0, token 1 → 0 (shares), token 2 → 1 (does not), token 3 → 1 and 2 (shares).
    const std::vector<char> routed = {1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 1, 1};
    QCOMPARE(shared_neighbours(routed, 4, 3), std::int64_t(2));
    QCOMPARE(shared_neighbours(std::span(routed).first(3), 1, 3), std::int64_t(0));  // one token: no pairs
    QVERIFY_THROWS_EXCEPTION(InvalidArgument, measure_routing(*model, std::span(ids).first(19), 20, 4));
  }

  // The fit inverts the model; the file round-trips and refuses bad fields by name; in the
  // simulator, skew lowers what a prompt loads while hit rates stay what the layout keeps; a model
  // measured on another architecture is refused.
  void a_routing_model_skews_prompts_not_popularity() {
    for (double a0 : {0.4, 2.0}) {
      const double a = fit_concentration(expected_distinct(a0, 20, 8, 2), 20, 8, 2);
      QVERIFY2(std::abs(a / a0 - 1) < 0.1, qPrintable(QStringLiteral("%1 fitted as %2").arg(a0).arg(a)));
    }
    QCOMPARE(fit_concentration(8.0, 20, 8, 2), 0.0);
    QVERIFY_THROWS_EXCEPTION(InvalidArgument, fit_concentration(1.5, 20, 8, 2));
    QVERIFY(std::abs(expected_overlap(0, 8, 2) - (1 - 15.0 / 28)) < 1e-12);
    for (double a0 : {0.4, 2.0}) {
      const double a = fit_concentration_to_overlap(expected_overlap(a0, 8, 2), 8, 2);
      QVERIFY2(std::abs(a / a0 - 1) < 0.1, qPrintable(QStringLiteral("overlap of %1 fitted as %2").arg(a0).arg(a)));
    }
    QCOMPARE(fit_concentration_to_overlap(0.3, 8, 2), 0.0);
    QVERIFY_THROWS_EXCEPTION(InvalidArgument, fit_concentration_to_overlap(1.0, 8, 2));
    // Mixtral-8x7B's, from its paper's neighbour overlap alone.
    const RoutingModel mixtral_routing = load_routing_model(samples() / "routing" / "mixtral-8x7b-published.json");
    QCOMPARE(mixtral_routing.windows, std::int64_t(0));
    QVERIFY(mixtral_routing.overlap > expected_overlap(0, 8, 2) && mixtral_routing.concentration > 0);
    QVERIFY(std::abs(mixtral_routing.distinct - expected_distinct(mixtral_routing.concentration, 20, 8, 2)) < 1e-9);
    QCOMPARE(fit_concentration_to_overlap(mixtral_routing.overlap, 8, 2), mixtral_routing.concentration);

    const fs::path file = samples() / "routing" / "sample-family-base.json";
    const RoutingModel r = load_routing_model(file);
    QCOMPARE(r.experts, std::int64_t(8));
    QVERIFY(r.concentration > 0 && r.distinct < r.uniform_distinct);
    QCOMPARE(routing_model_json(parse_routing_model(routing_model_json(r), "again.json")), routing_model_json(r));
    auto refused = [&](nlohmann::json j, const char* expected) {
      try {
        parse_routing_model(j.dump(), "r.json");
      } catch (const Error& e) {
        QVERIFY2(std::string(e.what()).find(expected) != std::string::npos && std::string(e.what()).find("r.json") != std::string::npos, e.what());
        return;
      }
      QFAIL("accepted");
    };
    const auto good = nlohmann::json::parse(routing_model_json(r));
    auto j = good;
    j["concentration"] = -1;
    refused(j, "concentration");
    j = good;
    j["schema"] = "mosaic.routing/2";
    refused(j, "mosaic.routing/1");
    j = good;
    j["concentraton"] = 1;
    refused(j, "concentraton");
    j = good;
    j["top_k"] = 9;
    refused(j, "top_k");
    j = good;
    j["overlap"] = 1.5;
    refused(j, "overlap");
    j["overlap"] = 1;  // two top-5 sets of 8 always meet
    QCOMPARE(parse_routing_model(j.dump(), "r.json").overlap, 1.0);

    // A MIG slice's 107 of 256 experts: prompts skewed as 0.3 concentrates them load far fewer
    // experts (TTFT falls); token hit rates stay the slice's share of positions either way.
    const SimFamily f = mixtral();
    const DeviceProfile d = a100();
    const auto workload = alternating(40, 1000, f.names());
    const auto store = sim_store(f);
    const auto uniform = simulate_workload(strategy(StrategyKind::Single, 107), *store, d, {}, workload, 3);
    const auto skewed = simulate_workload(strategy(StrategyKind::Single, 107), *store, d, {}, workload, 3, 0.3);
    const double ttft_u = mean_of(uniform, &RequestStats::ttft), ttft_s = mean_of(skewed, &RequestStats::ttft);
    QVERIFY2(ttft_s < 0.8 * ttft_u, qPrintable(QStringLiteral("TTFT %1 s skewed, %2 s uniform").arg(ttft_s).arg(ttft_u)));
    for (const auto* records : {&uniform, &skewed}) {
      const double hit = summarize(*records).hit_rate;
      QVERIFY2(std::abs(hit - 107.0 / 256) < 0.04, qPrintable(QString::number(hit)));
    }

    SweepConfig config = load_sweep_config(samples() / "paper-table2.json");
    QCOMPARE(config.routing, samples() / "routing" / "mixtral-8x7b-published.json");
    RoutingModel other = r;
    other.experts = 60;
    other.top_k = 4;
    const fs::path wrong = fs::path(tmp_.path().toStdString()) / "qwen-routing.json";
    std::ofstream(wrong) << routing_model_json(other);
    config.routing = wrong;
    config.rates = {0.01};
    config.repeats = 1;
    try {
      simulate_sweep(config, load_sim_family(config.variants), d).rethrow();
      QFAIL("a routing model of 60 experts was accepted for Mixtral");
    } catch (const MismatchError& e) {
      QVERIFY2(std::string(e.what()).find("qwen-routing.json") != std::string::npos, e.what());
    }
  }

  void a_simulated_sweep_is_recorded() {
    SweepConfig config = load_sweep_config(samples() / "paper-table2.json");
    QVERIFY(config.clock == RunClock::Simulated);
    QVERIFY(!config.host_memory.non_expert_pinned);
    config.rates = {0.01};
    config.repeats = 1;
    config.workload.duration_seconds = 2000;
    const fs::path db = fs::path(tmp_.path().toStdString()) / "sim.sqlite";
    Recorder recorder(db);
    QVERIFY(simulate_sweep(config, load_sim_family(config.variants), load_device_profile(config.device_profile),
                           recording(recorder, {}, [](const Error& e) { QFAIL(e.what()); }))
                .ok());
    const auto runs = recorder.runs();
    QCOMPARE(runs.size(), std::size_t(3));
    for (const auto& run : runs) {
      const auto j = nlohmann::json::parse(run.config_json);
      QCOMPARE(j["clock"].get<std::string>(), std::string("simulated"));
      QCOMPARE(j["device_profile"].get<std::string>(), a100().name);
      QCOMPARE(j["routing"]["file"].get<std::string>(), std::string("mixtral-8x7b-published.json"));
      QVERIFY(!recorder.requests(run.id).empty());
    }
    // The simulated clock wants a profile, and only it takes one.
    auto bad = [&](nlohmann::json j, const char* expected) {
      try {
        parse_sweep_config(j.dump(), "sweep.json", samples());
      } catch (const FormatError& e) {
        QVERIFY2(std::string(e.what()).find(expected) != std::string::npos, e.what());
        return;
      }
      QFAIL("accepted");
    };
    auto j = nlohmann::json::parse(config.text);
    j.erase("device_profile");
    bad(j, "device_profile");
    j = nlohmann::json::parse(config.text);
    j["clock"] = "virtual";
    bad(j, "simulated clock only");
    j = nlohmann::json::parse(config.text);
    j["host_memory"]["experts"] = "mapped";
    bad(j, "pinned or pageable");
  }

  // The simulated device's host link: a swap costs its bytes at the profile's rate plus one setup; a
  // fill ahead runs only while steps compute, and a swap into another buffer neither waits for it
  // nor finishes it.
  void the_simulated_link_carries_fills_ahead_apart() {
    const SimFamily f = mixtral();
    const DeviceProfile d = a100();
    const auto store = sim_store(f);
    const BackendShape shape{.layer_slots = std::vector<std::int64_t>(32, 8), .buffers = 3};
    const auto backend = make_sim_backend(*store, shape, SimulatedDevice{d, {}, drawn_routes(0, 1, 8, 2)});
    const double swap = copy_seconds(store->non_expert_bytes(), d.h2d_pinned, 1, d.copy_setup_seconds);
    QCOMPARE(backend->start_set(1, 1), store->non_expert_bytes());
    QCOMPARE(*backend->device_seconds(), 0.0);  // issued: the link carries it while steps compute
    QVERIFY(!backend->set_ready(1));
    QCOMPARE(backend->load_set(2, 0), store->non_expert_bytes());
    QVERIFY(std::abs(*backend->device_seconds() - swap) < 1e-12);
    QVERIFY(!backend->set_ready(1));  // the other buffer's swap did not finish it
    QCOMPARE(backend->load_set(2, 0), std::uint64_t(0));  // already held: nothing to copy
    backend->wait_set(1);
    QVERIFY(std::abs(*backend->device_seconds() - 2 * swap) < 1e-12);
    QVERIFY(backend->set_ready(1));
  }

  // Issue 62 §1: the simulated device under the one Engine decides as the engine does. The same
  // burst through the CPU backend and through a simulated device whose routes are those the CPU run
  // took (its router replaced) admits, swaps, hits, misses and loads alike, request by request; and
  // the simulated device charges its swaps and loads at its profile's link rate.
  void the_simulated_device_decides_as_the_cpu_backend_does() {
    Family family;
    const std::vector<std::string> names{"base", "ft1", "ft2", "esft1"};
    for (const std::string& v : names) family.add(v, fixture("mixtral", v));
    const HostStore store(family);
    const ModelSpec& s = store.spec();
    // Half of each layer's positions pinned, from the full variants in turn; the rest miss into lru's spares.
    RuntimeConfig config{.miss = "lru", .resident_sets = 1};
    for (std::int64_t l = 0; l < s.num_layers; ++l)
      for (std::int64_t e = 0; e < s.num_experts / 2 && s.is_sparse(l); ++e) config.pinned.push_back({l, e, static_cast<int>((l + e) % 3)});
    const std::uint64_t used = Runtime(store, config).budget().used();
    config.budget_bytes = used - static_cast<std::uint64_t>(s.num_sparse_layers()) * (static_cast<std::uint64_t>(s.num_experts * store.targets()) - 2) * store.expert_bytes();
    {
      const Runtime probe(store, config);
      QVERIFY2(probe.slots(0).count(SlotPool::Role::Spare) == 2, "the budget leaves two spare slots a layer");
    }
    std::vector<ServeRequest> burst;
    for (std::size_t i = 0; i < 12; ++i)
      burst.push_back({names[(i * 7) % names.size()], {.prompt = prompt_of(4 + i % 5, i, s.vocab_size), .max_new_tokens = 3 + static_cast<std::int64_t>(i % 4)},
                       false, 0.0});
    const EngineOptions options{.scheduler = {.max_sequences = 3, .max_wait_seconds = 1e6, .swap_ahead = false}, .clock = make_virtual_clock()};

    using Key = std::tuple<std::uint64_t, std::int64_t, std::int64_t>;  // request, position, layer
    std::map<Key, std::vector<int>> taken;
    std::mutex m;
    std::vector<RequestCallbacks> recording(burst.size());
    for (auto& cb : recording)
      cb.on_routes = [&](const RequestHandle& h, std::int64_t position, const std::vector<RoutedExpert>& routes) {
        const std::lock_guard lock(m);
        for (const RoutedExpert& r : routes) {
          std::vector<int>& experts = taken[{h.id(), position + r.token, r.layer}];
          if (static_cast<std::int64_t>(experts.size()) == s.top_k) experts.clear();  // recomputed: routed anew
          experts.push_back(r.expert);
        }
      };
    struct Served {
      std::vector<RequestResult> results;
      EngineStats stats;
    };
    auto serve = [&](const HostStore& on, const RuntimeConfig& c, const std::vector<RequestCallbacks>& callbacks) {
      Engine engine(std::make_shared<Runtime>(on, c), options);
      Served out;
      for (const auto& h : engine.submit_all(burst, callbacks)) out.results.push_back(h->wait());
      out.stats = engine.stats();
      return out;
    };
    const Served cpu = serve(store, config, recording);

    class Replayed final : public RouteSource {
     public:
      explicit Replayed(std::map<Key, std::vector<int>> routes) : routes_(std::move(routes)) {}
      void route(std::uint64_t request, std::int64_t position, std::int64_t layer, std::span<const int>, std::vector<int>& out) override {
        out = routes_.at({request, position, layer});
      }

     private:
      std::map<Key, std::vector<int>> routes_;
    };
    auto device = std::make_shared<SimulatedDevice>(SimulatedDevice{a100(), {}, std::make_shared<Replayed>(taken)});
    RuntimeConfig simulated = config;
    simulated.simulated = device;
    const std::unique_ptr<HostStore> shapes = HostStore::shapes_of(store);
    const Served sim = serve(*shapes, simulated, {});

    QCOMPARE(sim.stats.steps, cpu.stats.steps);
    QCOMPARE(sim.stats.swaps, cpu.stats.swaps);
    QCOMPARE(sim.stats.preemptions, cpu.stats.preemptions);
    QVERIFY2(cpu.stats.swaps >= 3, "the burst changes sets");
    // Which step admitted each request, and which gave it its first token: ranks of the clocks' times.
    auto ranks = [](const Served& run, double RequestStats::*at) {
      std::vector<double> times;
      for (const RequestResult& r : run.results) times.push_back(r.stats.*at);
      std::vector<double> distinct = times;
      std::sort(distinct.begin(), distinct.end());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      std::vector<std::int64_t> out;
      for (double t : times) out.push_back(std::lower_bound(distinct.begin(), distinct.end(), t) - distinct.begin());
      return out;
    };
    QCOMPARE(ranks(sim, &RequestStats::start), ranks(cpu, &RequestStats::start));
    QCOMPARE(ranks(sim, &RequestStats::first_token), ranks(cpu, &RequestStats::first_token));
    QCOMPARE(ranks(sim, &RequestStats::finish), ranks(cpu, &RequestStats::finish));
    const DeviceProfile& p = device->profile;
    std::int64_t misses = 0, hits = 0;
    for (std::size_t i = 0; i < burst.size(); ++i) {
      const RuntimeCounters &a = cpu.results[i].stats.counters, &b = sim.results[i].stats.counters;
      const QString who = QStringLiteral("request %1 (%2)").arg(i).arg(QString::fromStdString(burst[i].target));
      QVERIFY2(sim.results[i].tokens.size() == cpu.results[i].tokens.size(), qPrintable(who));
      QVERIFY2(a.swaps == b.swaps && a.swap_bytes == b.swap_bytes, qPrintable(who));
      QVERIFY2(std::abs(b.swap_seconds - static_cast<double>(b.swaps) * p.copy_setup_seconds -
                        static_cast<double>(b.swap_bytes) / p.h2d_pinned) < 1e-9, qPrintable(who));
      for (std::size_t l = 0; l < a.layers.size(); ++l) {
        const LayerCounts &x = a.layers[l], &y = b.layers[l];
        const QString where = who + QStringLiteral(", layer %1").arg(l);
        QVERIFY2(x.hits == y.hits && x.misses == y.misses && x.loads == y.loads && x.load_bytes == y.load_bytes, qPrintable(where));
        QVERIFY2(std::abs(y.load_seconds - static_cast<double>(y.loads) * p.copy_setup_seconds -
                          static_cast<double>(y.load_bytes) / p.h2d_pinned) < 1e-9, qPrintable(where));
        misses += y.misses;
        hits += y.hits;
      }
    }
    QVERIFY2(misses > 0 && hits > 0, "the layout leaves both hits and misses");
    // Its clock is the device's: the last request finishes after every step's and copy's priced time, not this host's.
    QVERIFY(sim.results.back().stats.finish > 0);
  }

};

QTEST_GUILESS_MAIN(TestSimulator)
#include "tst_simulator.moc"
