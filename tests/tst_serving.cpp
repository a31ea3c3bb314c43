// QoS serving: the Poisson workload's statistics, determinism and ExpertWeave's skew, traces, each
// strategy's semantics on a real fixture family (and esft on the sample family's adapters), both
// runner clocks with continuous batching, and the run summary's arithmetic.
#include <QTemporaryDir>
#include <QTest>

#include <map>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "analysis/layout.h"
#include "analysis/merge.h"
#include "common/error.h"
#include "common/json_fields.h"
#include "model/variant_folders.h"
#include "runtime/forward.h"
#include "serving/runner.h"
#include "serving/layout_planning.h"
#include "serving/layout_serving.h"
#include "serving/session.h"
#include "serving/session_file.h"
#include "serving/sweep.h"
#include "serving/sweep_run.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

class TestServing : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  Family family_;
  std::unique_ptr<HostStore> store_;
  std::optional<FamilyAnalysis> analysis_;
  std::vector<std::unique_ptr<Model>> own_;  // each variant alone, the reference

  fs::path scratch(const std::string& name) const { return fs::path(tmp_.path().toStdString()) / name; }
  // Requests alternating over the given targets, 1 s apart, 4 prompt and 3 output tokens.
  static std::vector<WorkloadRequest> alternating(const std::vector<std::string>& targets, int n) {
    std::vector<WorkloadRequest> w;
    for (int i = 0; i < n; ++i)
      w.push_back({static_cast<double>(i), targets[static_cast<std::size_t>(i) % targets.size()], {11, 22, 33, 44}, 3});
    return w;
  }
  Deployment deploy(StrategyKind kind, std::int64_t capacity = 12, std::int64_t max_sequences = 256) {
    StrategyConfig c{.kind = kind, .capacity = capacity};
    c.scheduler.max_sequences = max_sequences;
    return Deployment(c, family_, *store_, *analysis_, scratch(""));
  }
  // One request straight through a partition's engine.
  static RequestResult serve_one(const Deployment& d, const std::string& target, std::vector<std::int64_t> prompt, std::int64_t n) {
    Engine engine(d.partitions()[d.partition_of(target)].runtime);
    const auto h = engine.submit({target, {.prompt = std::move(prompt), .max_new_tokens = n}});
    return h->wait();
  }

 private Q_SLOTS:
  // A layout strategy given a budget and no capacity pins what the budget holds (it pinned nothing),
  // leaving room for a second set under resident_sets auto where capacity.h's rule says so; either
  // way the runtime stays within the budget and holds the sets the plan left room for.
  void aBudgetWithoutACapacityPlansFromTheBudget() {
    const CapacityPlan unlimited = plan_capacity(family_, std::uint64_t(1) << 50);
    for (const std::int64_t positions : {std::int64_t(8), unlimited.positions - 2}) {
      const std::uint64_t budget = unlimited.minimum_budget() + static_cast<std::uint64_t>(positions) * unlimited.bytes_per_expert;
      const CapacityPlan one = plan_capacity(family_, budget);
      const int sets = planned_sets(one, store_->sets());
      const Deployment d({.kind = StrategyKind::Consolidated, .budget_bytes = budget, .resident_sets = RuntimeConfig::kAutoSets}, family_,
                         *store_, *analysis_, scratch(""));
      const Runtime& rt = *d.partitions()[0].runtime;
      QCOMPARE(static_cast<std::int64_t>(rt.config().pinned.size()), with_sets(one, sets).capacity);
      QVERIFY(!rt.config().pinned.empty());
      QVERIFY(rt.resident_capacity() >= sets);
      QVERIFY(rt.budget().used() <= budget);
    }
  }

  void consolidatedServesTheLayoutItsPolicyPlans() {
    // The serving strategy pins exactly the layout the Layout panel (or consolidate) plans with the
    // same capacity and policy; round-robin and medoid differ on this family.
    std::vector<std::vector<PinnedExpert>> pinned;
    for (Policy p : {Policy::RoundRobin, Policy::Medoid}) {
      const Deployment d({.kind = StrategyKind::Consolidated, .capacity = 12, .policy = p}, family_, *store_, *analysis_, scratch(""));
      const Layout want = make_layout(family_, analysis_->sha256, plan_consolidation(analysis_->distances, 12, p));
      const auto expect = pinned_from_layout(want, match_layout(want, family_, analysis_->sha256, "layout"));
      const auto& got = d.partitions()[0].runtime->config().pinned;
      QCOMPARE(got.size(), expect.size());
      for (std::size_t i = 0; i < got.size(); ++i)
        QVERIFY(got[i].layer == expect[i].layer && got[i].expert == expect[i].expert && got[i].target == expect[i].target);
      pinned.push_back(got);
    }
    bool differ = false;
    for (std::size_t i = 0; i < pinned[0].size(); ++i) differ |= pinned[0][i].target != pinned[1][i].target;
    QVERIFY(differ);
  }


  void initTestCase() {
    QVERIFY(tmp_.isValid());
    for (const char* v : {"base", "ft1", "ft2"}) family_.add(v, fixture("olmoe", v));
    store_ = std::make_unique<HostStore>(family_);
    analysis_ = *analyze_family(family_);
    for (const Variant& v : family_.variants()) own_.push_back(Model::load(*v.checkpoint));
  }

  void theFirstRunStartsWarm() {
    // Two runs of one workload (two equal rates: the same seed) on a deployment that keeps every
    // target's set resident. What a fresh deployment loads once is served by the warm-up, outside
    // the runs: the first run swaps no more than the second (before, it loaded every set).
    std::string variants;
    for (const Variant& v : family_.variants()) variants += (variants.empty() ? "\"" : ", \"") + v.checkpoint->dir().string() + "\"";
    const SweepConfig config = parse_sweep_config(
        R"({"schema": "mosaic.sweep/1", "variants": [)" + variants +
            R"(], "rates": [3, 3], "duration_seconds": 3, "prompt": [4, 4], "output": [2, 2], "strategies": [{"kind": "consolidated", "capacity": 12, "resident_sets": 3}]})",
        "sweep.json", scratch(""));
    std::vector<std::int64_t> swaps;
    std::vector<std::size_t> served;
    SweepEvents events;
    events.run_finished = [&](const SweepRun&, const std::vector<RequestRecord>& records, const RunSummary&, bool) {
      std::int64_t n = 0;
      for (const RequestRecord& r : records) n += r.stats.counters.swaps;
      swaps.push_back(n);
      served.push_back(records.size());
    };
    QVERIFY(run_sweep(config, family_, *store_, *analysis_, events).ok());
    QCOMPARE(swaps.size(), std::size_t(2));
    QVERIFY(served[0] > 0 && served[0] == served[1]);
    QCOMPARE(swaps[0], swaps[1]);
    QCOMPARE(swaps[0], std::int64_t(0));
  }

  void strategiesOfOneKindAreRecordedApart() {
    // Two consolidated strategies that differ in capacity, one with a name of its own, and a third
    // differing in its hit policy too: each is named by what sets it apart, and its runs are
    // recorded under that name (before, all three were "consolidated", one line in every chart).
    std::string variants;
    for (const Variant& v : family_.variants()) variants += (variants.empty() ? "\"" : ", \"") + v.checkpoint->dir().string() + "\"";
    const std::string head = R"({"schema": "mosaic.sweep/1", "variants": [)" + variants +
                             R"(], "rates": [4], "duration_seconds": 1, "prompt": [4, 4], "output": [2, 2], "strategies": )";
    const SweepConfig config = parse_sweep_config(
        head + R"([{"kind": "consolidated", "capacity": 8}, {"kind": "consolidated", "capacity": 12}, )" +
            R"({"kind": "consolidated", "capacity": 12, "hit": "strict"}, {"kind": "consolidated", "capacity": 8, "name": "small"}, )" +
            R"({"kind": "single"}]})",
        "sweep.json", scratch(""));
    std::vector<std::string> names;
    for (const StrategyConfig& sc : config.strategies) names.push_back(strategy_label(sc));
    QCOMPARE(names, (std::vector<std::string>{"consolidated (capacity 8)", "consolidated (capacity 12)",
                                              "consolidated (capacity 12, hit strict)", "small", "single"}));
    std::set<std::string> recorded;
    SweepEvents events;
    events.run_finished = [&](const SweepRun& run, const std::vector<RequestRecord>&, const RunSummary&, bool) { recorded.insert(run.strategy); };
    QVERIFY(run_sweep(config, family_, *store_, *analysis_, events).ok());
    QCOMPARE(recorded, std::set<std::string>(names.begin(), names.end()));
    // The same strategy twice, or a name that meets another's, is refused naming both.
    expect_mentions(error_of<FormatError>([&] {
                      parse_sweep_config(head + R"([{"kind": "consolidated", "capacity": 8}, {"kind": "consolidated", "capacity": 8}]})", "sweep.json", scratch(""));
                    }),
                    {"strategies[1]", "strategies[0]", "'consolidated'", "\"name\"", "repeats"});
    expect_mentions(error_of<FormatError>([&] {
                      parse_sweep_config(head + R"([{"kind": "single", "name": "lru"}, {"kind": "consolidated", "name": "lru"}]})", "sweep.json", scratch(""));
                    }),
                    {"strategies[1]", "'lru'"});
    expect_mentions(error_of<FormatError>([&] { parse_sweep_config(head + R"([{"kind": "single", "name": ""}]})", "sweep.json", scratch("")); }),
                    {"strategies[0].name", "1 to 80"});
  }

  void aSweepNamesTheDeviceItsEngineRunsOn() {
    nlohmann::json variants = nlohmann::json::array();
    for (const Variant& v : family_.variants()) variants.push_back(v.checkpoint->dir().string());
    auto sweep = [&](const nlohmann::json& extra, const std::string& clock = "virtual") {
      nlohmann::json j = {{"schema", "mosaic.sweep/1"}, {"variants", variants}, {"clock", clock}, {"rates", {3}}, {"duration_seconds", 1},
                          {"prompt", {4, 4}}, {"output", {2, 2}},
                          {"strategies", {{{"kind", "consolidated"}, {"capacity", 12}}, {{"kind", "single"}}}}};
      j.update(extra);
      return j.dump();
    };
    // Every strategy runs on the sweep's device; cpu when it names none.
    SweepConfig config = parse_sweep_config(sweep({{"device", "cuda"}}), "sweep.json", scratch(""));
    QVERIFY(config.device == Device::Cuda);
    for (const StrategyConfig& s : config.strategies) QVERIFY(s.device == Device::Cuda);
    QVERIFY(parse_sweep_config(sweep(nlohmann::json::object()), "sweep.json", scratch("")).strategies[1].device == Device::Cpu);
    for (const nlohmann::json& bad : {nlohmann::json{{"device", "tpu"}}, nlohmann::json{{"device", 1}}})
      expect_mentions(error_of<FormatError>([&] { parse_sweep_config(sweep(bad), "sweep.json", scratch("")); }),
                      {"sweep.json", "'device'", "cpu", "cuda"});
    expect_mentions(error_of<FormatError>([&] {
                      parse_sweep_config(sweep({{"device", "cpu"}, {"device_profile", "a100.json"}}, "simulated"), "sweep.json", scratch(""));
                    }),
                    {"sweep.json", "'device'", "on the simulated clock that is a simulated device", "device_profile"});

    // What `bench --device` and the workbench's selector do: every strategy moves, and the text
    // recorded with each run says so.
    set_sweep_device(config, Device::Cpu);
    for (const StrategyConfig& s : config.strategies) QVERIFY(s.device == Device::Cpu);
    QCOMPARE(nlohmann::json::parse(config.text)["device"].get<std::string>(), std::string("cpu"));
    QVERIFY(parse_sweep_config(config.text, "again.json", scratch("")).device == Device::Cpu);
    std::vector<std::string> recorded;
    SweepEvents events;
    events.run_started = [&](SweepRun& run, std::size_t) { recorded.push_back(nlohmann::json::parse(run.config_json)["device"]); };
    QVERIFY(run_sweep(config, family_, *store_, *analysis_, events).ok());
    QCOMPARE(recorded, (std::vector<std::string>{"cpu", "cpu"}));

    // CUDA where no GPU can be used: refused before anything is deployed, naming what to do.
    set_sweep_device(config, Device::Cuda);
    recorded.clear();
    const auto outcome = run_sweep(config, family_, *store_, *analysis_, events);
    if (const auto why = device_unavailable(Device::Cuda)) {
      expect_mentions(error_of<DeviceError>([&] { outcome.rethrow(); }), {"sweep", "device 'cuda'", *why, "\"device\": \"cpu\""});
      QVERIFY(recorded.empty());
    } else {  // a GPU machine: the same sweep runs there, and says which GPU
      QVERIFY(outcome.ok());
      QVERIFY2(recorded.size() == 2 && recorded[0].starts_with("cuda: "), recorded.empty() ? "" : recorded[0].c_str());
    }
    auto simulated = parse_sweep_config(sweep({{"device_profile", "a100.json"}}, "simulated"), "sweep.json", scratch(""));
    expect_mentions(error_of<InvalidArgument>([&] { set_sweep_device(simulated, Device::Cuda); }), {"device", "simulated", "device_profile"});

    // The host tier's budget: a byte size or "all"; recorded exactly when `bench --host-budget` sets it.
    QCOMPARE(parse_sweep_config(sweep({{"host_budget", "2GiB"}}), "sweep.json", scratch("")).host_budget, std::optional<std::uint64_t>(2ull << 30));
    QVERIFY(!parse_sweep_config(sweep({{"host_budget", "all"}}), "sweep.json", scratch("")).host_budget);
    expect_mentions(error_of<FormatError>([&] { parse_sweep_config(sweep({{"host_budget", "lots"}}), "sweep.json", scratch("")); }),
                    {"sweep.json", "'host_budget'", "16GiB"});
    expect_mentions(error_of<FormatError>([&] {
                      parse_sweep_config(sweep({{"host_budget", "1GiB"}, {"device_profile", "a100.json"}}, "simulated"), "sweep.json", scratch(""));
                    }),
                    {"'host_budget'", "simulated clock"});
    set_sweep_host_budget(config, 3ull << 30);
    QCOMPARE(parse_sweep_config(config.text, "again.json", scratch("")).host_budget, std::optional<std::uint64_t>(3ull << 30));
    expect_mentions(error_of<InvalidArgument>([&] { set_sweep_host_budget(simulated, 1ull << 30); }), {"--host-budget", "simulated"});
  }

  void ratesComeFromTheEnginesOwnSaturation() {
    // The engine's path of "rates": {"saturation": …}: a burst measures the strategy on this engine,
    // the grid is built from it, the strategy stops at the first rate past `to` × its own, and the
    // last run is past its ridge (most of its requests finish after the arrival window).
    std::string variants;
    for (const Variant& v : family_.variants()) variants += (variants.empty() ? "\"" : ", \"") + v.checkpoint->dir().string() + "\"";
    const SweepConfig config = parse_sweep_config(
        R"({"schema": "mosaic.sweep/1", "variants": [)" + variants +
            R"(], "rates": {"saturation": {"points": 3, "from": 0.25, "to": 3, "probe_requests": 64}}, "duration_seconds": 0.5,
               "prompt": [4, 4], "output": [4, 4], "strategies": [{"kind": "single-resident", "max_sequences": 4}]})",
        "sweep.json", scratch(""));
    std::vector<SaturationProbe> probes;
    std::vector<double> grid;
    std::vector<std::pair<double, RunSummary>> runs;
    SweepEvents events;
    events.rates_chosen = [&](const std::vector<SaturationProbe>& p, const std::vector<double>& r) { probes = p, grid = r; };
    events.run_finished = [&](const SweepRun& run, const std::vector<RequestRecord>&, const RunSummary& s, bool) {
      runs.push_back({run.rate, s});
      QCOMPARE(nlohmann::json::parse(run.config_json)["saturation"][0]["requests"].get<int>(), 64);
    };
    QVERIFY(run_sweep(config, family_, *store_, *analysis_, events).ok());
    QCOMPARE(probes.size(), std::size_t(1));
    QCOMPARE(probes[0].requests, std::size_t(64));
    QVERIFY(probes[0].rate_per_s > 0);
    QCOMPARE(grid.size(), std::size_t(3));
    QCOMPARE(runs.size(), std::size_t(3));  // the grid's top is 3× its own: every rate runs
    QVERIFY2(std::abs(grid.back() / (3 * probes[0].rate_per_s) - 1) < 0.01, qPrintable(QString::number(grid.back())));
    // At 3× saturation about a third finish in the window; 0.8 leaves room for a probe measured
    // on a busy machine (CI runs tests two at a time).
    const RunSummary& past = runs.back().second;
    QVERIFY2(static_cast<double>(past.completed_in_window) < 0.8 * static_cast<double>(past.requests),
             qPrintable(QStringLiteral("%1 of %2 finished in the window").arg(past.completed_in_window).arg(past.requests)));

    // Stopped during the burst (the workbench's Stop): the sweep ends there, cancelled, before any run.
    std::string probed;
    std::size_t seen = 0, burst = 0;
    bool started = false;
    SweepEvents stopping;
    stopping.probe_progress = [&](const std::string& strategy, std::size_t done, std::size_t total) {
      probed = strategy, seen = done, burst = total;
      return done < 3;
    };
    stopping.run_started = [&](SweepRun&, std::size_t) { started = true; };
    QVERIFY(run_sweep(config, family_, *store_, *analysis_, stopping).is_cancelled());
    QCOMPARE(probed, std::string("single-resident"));
    QCOMPARE(seen, std::size_t(3));
    QCOMPARE(burst, std::size_t(64));
    QVERIFY(!started);
  }

  void poissonArrivalsHaveTheRightMeanAndVariance() {
    // 2 targets at 5 and 20 requests/s over 400 s: counts N ~ Poisson(λT), inter-arrival gaps
    // ~ Exp(λ), so mean gap 1/λ and variance 1/λ².
    const WorkloadSpec spec{.targets = {"a", "b"}, .rates = {5, 20}, .duration_seconds = 400, .vocab_size = 100, .seed = 42};
    const auto w = generate_workload(spec);
    for (auto [name, rate] : {std::pair{"a", 5.0}, std::pair{"b", 20.0}}) {
      std::vector<double> t;
      for (const auto& r : w)
        if (r.target == name) t.push_back(r.arrival);
      const double expected = rate * 400, sd = std::sqrt(expected);
      QVERIFY2(std::abs(static_cast<double>(t.size()) - expected) < 4 * sd, qPrintable(QString::number(t.size())));
      double mean = 0, var = 0;
      for (std::size_t i = 1; i < t.size(); ++i) mean += t[i] - t[i - 1];
      mean /= static_cast<double>(t.size() - 1);
      for (std::size_t i = 1; i < t.size(); ++i) var += std::pow(t[i] - t[i - 1] - mean, 2);
      var /= static_cast<double>(t.size() - 2);
      // The sample mean of n exponential gaps has sd (1/λ)/√n; its variance estimate about 2× that relatively.
      const double n = static_cast<double>(t.size());
      QVERIFY2(std::abs(mean - 1 / rate) < 4 / rate / std::sqrt(n), qPrintable(QString::number(mean)));
      QVERIFY2(std::abs(var - 1 / (rate * rate)) < 4 * std::sqrt(8.0 / n) / (rate * rate), qPrintable(QString::number(var)));
    }
    for (std::size_t i = 1; i < w.size(); ++i) QVERIFY(w[i - 1].arrival <= w[i].arrival);
    QCOMPARE(w.front().prompt.size(), std::size_t(20));  // the paper's lengths by default
    QCOMPARE(w.front().max_new_tokens, std::int64_t(25));
  }

  void workloadsAreSeededAndSkewed() {
    WorkloadSpec spec{.targets = {"a", "b", "c"}, .total_rate = 7, .alpha = 0.5, .duration_seconds = 50,
                      .prompt = {5, 9}, .output = {1, 4}, .vocab_size = 64, .seed = 3};
    const auto a = generate_workload(spec), b = generate_workload(spec);
    QCOMPARE(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      QCOMPARE(a[i].arrival, b[i].arrival);
      QCOMPARE(a[i].prompt, b[i].prompt);
      QVERIFY(a[i].prompt.size() >= 5 && a[i].prompt.size() <= 9 && a[i].max_new_tokens >= 1 && a[i].max_new_tokens <= 4);
      for (auto id : a[i].prompt) QVERIFY(id >= 0 && id < 64);
    }
    // S-LoRA's and ExpertWeave's skew: target i of n gets ((i+1)/n)^α − (i/n)^α. α = 1 is even;
    // smaller α skews towards the first (two adapters at α ≈ 0.32: 80 % and 20 %, as ExpertWeave's).
    for (double x : power_law_shares(3, 1.0)) QVERIFY(std::abs(x - 1.0 / 3) < 1e-12);
    const auto shares = power_law_shares(3, 0.5);
    QVERIFY(std::abs(shares[0] - std::sqrt(1.0 / 3)) < 1e-12 && std::abs(shares[2] - (1 - std::sqrt(2.0 / 3))) < 1e-12);
    QVERIFY(shares[0] > shares[1] && shares[1] > shares[2]);
    QVERIFY(std::abs(power_law_shares(2, std::log(0.8) / std::log(0.5))[0] - 0.8) < 1e-12);
    QVERIFY(power_law_shares(4, 0.1)[0] > power_law_shares(4, 0.5)[0]);  // smaller α, heavier skew
    QVERIFY(std::abs(target_rates(spec)[0] - 7 * std::sqrt(1.0 / 3)) < 1e-12);
    expect_mentions(error_of<InvalidArgument>([&] { power_law_shares(3, 0); }), {"alpha", "(0, 1]"});
    expect_mentions(error_of<InvalidArgument>([&] { power_law_shares(3, 2); }), {"alpha"});
    // Another seed, another workload; another target added, the first targets' arrivals unchanged.
    spec.seed = 4;
    QVERIFY(generate_workload(spec).front().arrival != a.front().arrival);
    WorkloadSpec two{.targets = {"a"}, .rates = {2}, .duration_seconds = 30, .vocab_size = 10};
    WorkloadSpec three = two;
    three.targets.push_back("z");
    three.rates.push_back(9);
    std::vector<double> alone, mixed;
    for (const auto& r : generate_workload(two)) alone.push_back(r.arrival);
    for (const auto& r : generate_workload(three))
      if (r.target == "a") mixed.push_back(r.arrival);
    QCOMPARE(alone, mixed);
    expect_mentions(error_of<InvalidArgument>([&] { generate_workload({.targets = {}, .vocab_size = 5}); }), {"targets"});
    expect_mentions(error_of<InvalidArgument>([&] { generate_workload({.targets = {"a"}, .rates = {1, 2}, .vocab_size = 5}); }),
                    {"2 rates for 1 targets"});
    expect_mentions(error_of<InvalidArgument>([&] { generate_workload({.targets = {"a"}, .prompt = {3, 2}, .vocab_size = 5}); }),
                    {"prompt length"});
  }

  void tracesRoundTripAndRefuseBadLines() {
    const auto w = generate_workload({.targets = {"x", "y"}, .total_rate = 3, .duration_seconds = 5, .vocab_size = 50});
    write_trace(scratch("t.jsonl"), w);
    const auto back = read_trace(scratch("t.jsonl"));
    QCOMPARE(back.size(), w.size());
    for (std::size_t i = 0; i < w.size(); ++i) {
      QCOMPARE(back[i].arrival, w[i].arrival);
      QCOMPARE(back[i].target, w[i].target);
      QCOMPARE(back[i].prompt, w[i].prompt);
    }
    std::ofstream(scratch("bad.jsonl")) << R"({"arrival": 1, "target": "x", "prompt": [1], "max_new_tokens": 2})" << "\n"
                                        << R"({"arrival": 0.5, "target": "x", "prompt": [1], "max_new_tokens": 2})" << "\n";
    expect_mentions(error_of<FormatError>([&] { read_trace(scratch("bad.jsonl")); }), {"bad.jsonl", "line 2", "back in time"});
    std::ofstream(scratch("bad2.jsonl")) << R"({"arrival": 1, "target": "x", "prompt": ["a"], "max_new_tokens": 2})" << "\n";
    expect_mentions(error_of<FormatError>([&] { read_trace(scratch("bad2.jsonl")); }), {"line 1", "'prompt'"});
    // A repeated key or too deep a line is placed by its line like any other error.
    std::ofstream(scratch("twice.jsonl")) << R"({"arrival": 0, "target": "x", "prompt": [1], "max_new_tokens": 2})" << "\n\n"
                                          << R"({"arrival": 1, "arrival": 2, "target": "x", "prompt": [1], "max_new_tokens": 2})" << "\n";
    expect_mentions(error_of<FormatError>([&] { read_trace(scratch("twice.jsonl")); }), {"twice.jsonl", "line 3", "'arrival'", "twice"});
    std::ofstream(scratch("deep.jsonl")) << std::string(200, '[') << std::string(200, ']') << "\n";
    expect_mentions(error_of<FormatError>([&] { read_trace(scratch("deep.jsonl")); }), {"line 1", "deeper than"});
    // Negative ids, negative or huge lengths and far-future arrivals are refused as the file is read.
    for (const auto& [line, field] : std::vector<std::pair<std::string, std::string>>{
             {R"({"arrival": 0, "target": "x", "prompt": [1, -4], "max_new_tokens": 2})", "'prompt'"},
             {R"({"arrival": 0, "target": "x", "prompt": [1], "max_new_tokens": -1})", "'max_new_tokens'"},
             {R"({"arrival": 0, "target": "x", "prompt": [1], "max_new_tokens": 100000000000})", "'max_new_tokens'"},
             {R"({"arrival": 1e300, "target": "x", "prompt": [1], "max_new_tokens": 1})", "'arrival'"}}) {
      std::ofstream(scratch("bad3.jsonl")) << line << "\n";
      expect_mentions(error_of<FormatError>([&] { read_trace(scratch("bad3.jsonl")); }), {"bad3.jsonl", field});
    }
  }

  void consolidatedSwapsAndNoReconfigNever() {
    auto consolidated = deploy(StrategyKind::Consolidated), fixed = deploy(StrategyKind::NoReconfig);
    const auto w = alternating({"ft1", "ft1", "ft2", "base"}, 8);  // 1 s apart: each runs alone
    const auto a = run_workload(consolidated, w), b = run_workload(fixed, w);
    std::int64_t swaps = 0;
    for (const auto& r : a) swaps += r.stats.counters.swaps;
    QCOMPARE(swaps, std::int64_t(6));  // warm on base: ft1 ft1 ft2 base ft1 ft1 ft2 base → 6 changes
    for (const auto& r : b) QCOMPARE(r.stats.counters.swaps, std::int64_t(0));
    QVERIFY(summarize(b).swap_bytes == 0);
  }

  // A traced run records, per request, every token's choices in every MoE layer (the last
  // generated token is never fed back), adding up to its counters; an untraced run records none.
  void tracedRunsRecordEveryRoute() {
    auto consolidated = deploy(StrategyKind::Consolidated);
    const auto w = alternating({"ft1", "ft2"}, 4);
    const auto traced = run_workload(consolidated, w, {.trace_routes = true});
    const std::int64_t k = store_->spec().top_k;
    for (const RequestRecord& r : traced) {
      const LayerCounts total = r.stats.counters.total();
      std::int64_t hits = 0, misses = 0, last = -1;
      std::map<std::int64_t, std::int64_t> per_position;
      for (const RoutedExpert& e : r.routes) {
        hits += e.outcome == RoutedExpert::Outcome::Hit;
        misses += e.outcome == RoutedExpert::Outcome::Miss;
        ++per_position[e.token];
        last = std::max<std::int64_t>(last, e.token);
      }
      QCOMPARE(hits, total.hits);
      QCOMPARE(misses, total.misses);
      QCOMPARE(last, r.stats.prompt_tokens + r.stats.generated_tokens - 2);
      for (const auto& [position, n] : per_position) QCOMPARE(n % k, std::int64_t(0));
    }
    for (const RequestRecord& r : run_workload(consolidated, w)) QVERIFY(r.routes.empty());
  }

  void timeSharingMovesTheWholeModelOnEveryMismatch() {
    auto ts = deploy(StrategyKind::TimeSharing);
    const auto w = alternating({"base", "ft1", "ft1", "ft2"}, 8);  // mismatches at 1, 3, 4, 5, 7
    const auto records = run_workload(ts, w);
    // What a swap from `a` to `b` moves: every tensor of b's model that is not a's, byte for byte
    // (the few identical ones stay where they are).
    auto moved = [&](int a, int b) {
      std::uint64_t bytes = 0;
      const auto &ta = store_->set_tensors(store_->set_of(a)), &tb = store_->set_tensors(store_->set_of(b));
      for (std::size_t i = 0; i < ta.size(); ++i) bytes += ta[i] == tb[i] ? 0 : store_->tensor(tb[i]).bytes.size();
      for (std::int64_t l = 0; l < 3; ++l)
        for (std::int64_t e = 0; e < 8; ++e) bytes += store_->expert(a, l, e) == store_->expert(b, l, e) ? 0 : store_->expert_bytes();
      return bytes;
    };
    QVERIFY(moved(0, 1) > store_->non_expert_bytes() / 2 + 20 * store_->expert_bytes());  // nearly the whole model
    std::string prev = "base";
    for (const auto& r : records) {
      const bool mismatch = r.target != prev;
      QCOMPARE(r.stats.counters.swaps, std::int64_t(mismatch));
      QCOMPARE(r.stats.counters.swap_bytes, mismatch ? moved(store_->index(prev), store_->index(r.target)) : 0);
      QCOMPARE(r.stats.counters.total().misses, std::int64_t(0));  // the whole model is resident
      prev = r.target;
    }
    // The tokens are each variant's own.
    QCOMPARE(serve_one(ts, "ft2", {11, 22, 33, 44}, 3).tokens, generate(*own_[2], {.prompt = {11, 22, 33, 44}, .max_new_tokens = 3}).tokens);
  }

  void spaceSharingPartitionsKeepToTheirShare() {
    // Room per partition: exactly the planner's minimum and 4 experts.
    const CapacityPlan unlimited = plan_capacity(family_, std::uint64_t(1) << 40);
    const std::uint64_t per = unlimited.minimum_budget() + 4 * unlimited.bytes_per_expert;
    const Deployment ss({.kind = StrategyKind::SpaceSharing, .capacity = 12, .budget_bytes = 3 * per}, family_, *store_, *analysis_,
                        scratch(""));
    QCOMPARE(ss.partitions().size(), std::size_t(3));
    const auto records = run_workload(ss, alternating({"base", "ft1", "ft2"}, 6));
    for (std::size_t lane = 0; lane < 3; ++lane) {
      const Runtime& rt = *ss.partitions()[lane].runtime;
      QCOMPARE(rt.budget().budget(), per);
      QCOMPARE(rt.budget().used(), per);
      QCOMPARE(rt.config().copy_slowdown, 3.0);
      QCOMPARE(rt.config().compute_slowdown, 3.0);
      std::int64_t pinned = 0;
      for (std::int64_t l = 0; l < 3; ++l) {
        pinned += rt.slots(l).count(SlotPool::Role::Pinned);
        for (std::int64_t s = 0; s < rt.slots(l).count(SlotPool::Role::Pinned); ++s)
          QCOMPARE(rt.slots(l).source(s).target, static_cast<int>(lane));  // only its own variant's experts
      }
      QCOMPARE(pinned, std::int64_t(4));
    }
    for (const auto& r : records) {
      QCOMPARE(r.lane, ss.partition_of(r.target));
      QCOMPARE(r.stats.counters.swaps, std::int64_t(0));  // each partition keeps its variant
    }
    expect_mentions(error_of<BudgetError>([&] {
      Deployment({.kind = StrategyKind::SpaceSharing, .capacity = 12, .budget_bytes = 3 * (per - 1)}, family_, *store_, *analysis_, scratch(""));
    }), {"device budget"});
  }

  void singleAndAveragingServeOneModel() {
    // single, as the paper's: ft2 serves every name, offloaded to the capacity the others get (its
    // other experts load on a miss); single-resident: every expert of ft2 pinned. Both are ft2.
    const Deployment single({.kind = StrategyKind::Single, .capacity = 12, .single_target = "ft2"}, family_, *store_, *analysis_, scratch(""));
    const Deployment resident({.kind = StrategyKind::SingleResident, .capacity = 12, .single_target = "ft2"}, family_, *store_, *analysis_,
                              scratch(""));
    const std::vector<std::int64_t> prompt{11, 22, 33, 44};
    const auto& pinned = single.partitions()[0].runtime->config().pinned;
    QCOMPARE(pinned.size(), std::size_t(12));
    QVERIFY(std::all_of(pinned.begin(), pinned.end(), [&](const PinnedExpert& p) { return p.target == store_->index("ft2"); }));
    QCOMPARE(resident.partitions()[0].runtime->config().pinned.size(), static_cast<std::size_t>(moe_positions(store_->spec())));
    const auto want = generate(*own_[2], {.prompt = prompt, .max_new_tokens = 3}).tokens;
    const RequestResult offloaded = serve_one(single, "base", prompt, 3), all = serve_one(resident, "base", prompt, 3);
    QCOMPARE(offloaded.tokens, want);
    QCOMPARE(all.tokens, want);
    QVERIFY(offloaded.stats.counters.total().misses > 0);
    QCOMPARE(all.stats.counters.total().misses, std::int64_t(0));
    auto avg = deploy(StrategyKind::Averaging);
    write_averaged(family_, scratch("avg-ref"));
    const auto merged = Model::load(Checkpoint(scratch("avg-ref")));
    const RequestResult served = serve_one(avg, "base", prompt, 3);
    QCOMPARE(served.tokens, generate(*merged, {.prompt = prompt, .max_new_tokens = 3}).tokens);
    QCOMPARE(served.stats.counters.total().misses, std::int64_t(0));
    QCOMPARE(serve_one(avg, "ft1", prompt, 3).tokens, served.tokens);  // every target, one model
  }

  void esftServesAdaptersOverOneBase() {
    Family family;
    const fs::path sample = fs::path(MOSAIC_RESOURCES) / "sample-family";
    open_family(family, {sample / "esft-bible", sample / "esft-jargon", sample / "esft-c-headers", sample / "fortunes"});
    const HostStore store(family);
    const auto analysis = *analyze_family(family);
    const Deployment d({.kind = StrategyKind::Esft}, family, store, analysis, scratch(""));
    QCOMPARE(d.targets(), (std::vector<std::string>{"esft-bible", "esft-jargon", "esft-c-headers"}));
    // A skewed mix of the three adapters at once, under one resident set: no miss, no swap (warm
    // on the base's set, which every adapter shares), and each adapter's own tokens.
    const auto w = generate_workload({.targets = d.targets(), .total_rate = 40, .alpha = 0.3, .duration_seconds = 0.5,
                                      .prompt = {6, 12}, .output = {4, 4}, .vocab_size = store.spec().vocab_size, .seed = 2});
    QVERIFY(w.size() >= 8);
    const auto records = run_workload(d, w);
    QCOMPARE(records.size(), w.size());
    std::int64_t swaps = 0;
    for (const auto& r : records) {
      QCOMPARE(r.outcome, Finish::Length);
      QCOMPARE(r.stats.counters.total().misses, std::int64_t(0));
      swaps += r.stats.counters.swaps;
    }
    QCOMPARE(swaps, std::int64_t(0));
    const auto own = Model::load(*family.find("esft-jargon")->checkpoint);
    QCOMPARE(serve_one(d, "esft-jargon", {5, 6, 7, 8}, 4).tokens, generate(*own, {.prompt = {5, 6, 7, 8}, .max_new_tokens = 4}).tokens);
    expect_mentions(error_of<InvalidArgument>([&] { Deployment({.kind = StrategyKind::Esft}, family_, *store_, *analysis_, scratch("")); }),
                    {"no ESFT adapter"});
  }

  void virtualExpertsServeTheirPlanAndUpdate() {
    MOSAIC_RELEASE_BUILD_ONLY("virtual experts are served in tst_virtual_experts and tst_cli's planVirtualThenServeIt");
    // Planned on calibration text at a budget: the deployment pins the plan's initial set, the router
    // masked to it; serving a skewed workload updates the sets, and every request finishes.
    Family family;
    const fs::path sample = fs::path(MOSAIC_RESOURCES) / "sample-family";
    open_family(family, {sample / "bible", sample / "fortunes"});
    const HostStore store(family);
    const auto analysis = *analyze_family(family);
    // Below what every expert takes (about 13 MiB with this reserve): a budget that holds them all masks none.
    StrategyConfig c{.kind = StrategyKind::VirtualExperts, .budget_bytes = std::uint64_t(12) << 20};
    c.reserve = {.context_tokens = 256, .requests = 1, .prefill_chunk = 128};
    c.scheduler.max_batch_tokens = 128;
    c.calibration = sample / "heldout" / "bible.txt";
    c.updates.update_every = 2;
    const Deployment d(c, family, store, analysis, scratch(""));
    const Runtime& rt = *d.partitions()[0].runtime;
    QCOMPARE(rt.miss_policy().name(), std::string_view("masked"));
    QVERIFY(rt.virtual_experts());
    QVERIFY(rt.budget().used() <= *c.budget_bytes);
    const auto w = generate_workload({.targets = d.targets(), .total_rate = 20, .alpha = 0.5, .duration_seconds = 1,
                                      .prompt = {8, 16}, .output = {8, 8}, .vocab_size = store.spec().vocab_size, .seed = 4});
    const auto records = run_workload(d, w);
    QCOMPARE(records.size(), w.size());
    for (const auto& r : records) {
      QCOMPARE(r.outcome, Finish::Length);
      QCOMPARE(r.stats.counters.total().misses, std::int64_t(0));
      QCOMPARE(r.stats.counters.total().loads, std::int64_t(0));
    }
    QVERIFY(rt.virtual_experts()->stats().updates >= 1);
    // Uniform counts from a capacity: every layer keeps the same number of each variant's experts.
    const Deployment u({.kind = StrategyKind::VirtualExperts, .capacity = 24}, family, store, analysis, scratch(""));
    QCOMPARE(u.partitions()[0].runtime->config().pinned.size(), std::size_t(24));  // 3 per layer × 4 layers × 2 variants
    // Calibration without a budget to plan for is refused, saying what to give.
    expect_mentions(error_of<InvalidArgument>([&] {
                      StrategyConfig bad{.kind = StrategyKind::VirtualExperts, .capacity = 8};
                      bad.calibration = sample / "heldout" / "bible.txt";
                      Deployment(bad, family, store, analysis, scratch(""));
                    }),
                    {"calibration", "budget"});
  }

  void virtualAndRealClocks() {
    // Virtual: a burst at t = 0 runs as one batch; one at a time, each starts when the previous ended.
    std::vector<WorkloadRequest> burst(5, WorkloadRequest{0.0, "ft1", {1, 2, 3}, 4});
    const auto batched = run_workload(deploy(StrategyKind::Consolidated), burst);
    const auto serial = run_workload(deploy(StrategyKind::Consolidated, 12, 1), burst);
    QCOMPARE(batched.size(), std::size_t(5));
    for (const auto& r : batched) QCOMPARE(r.stats.start, 0.0);
    for (std::size_t i = 1; i < serial.size(); ++i) {
      QVERIFY(serial[i].stats.start >= serial[i - 1].stats.finish);
      QVERIFY(serial[i].stats.queue_wait() > 0 && serial[i].stats.first_token > serial[i].stats.start);
    }
    QVERIFY(summarize(batched).makespan_seconds < summarize(serial).makespan_seconds);
    // Real: spaced arrivals are served after they arrive, on the wall clock.
    std::vector<WorkloadRequest> spaced;
    for (int i = 0; i < 4; ++i) spaced.push_back({0.05 * i, i % 2 ? "ft2" : "base", {1, 2, 3}, 2});
    std::vector<std::int64_t> finished;
    auto s = deploy(StrategyKind::Consolidated);
    const auto r = run_workload(s, spaced, {.clock = RunClock::Real, .on_finished = [&](const RequestRecord& rec) { finished.push_back(rec.index); }});
    QCOMPARE(r.size(), std::size_t(4));
    QCOMPARE(finished, (std::vector<std::int64_t>{0, 1, 2, 3}));
    for (const auto& rec : r)
      QVERIFY2(rec.stats.start >= rec.stats.arrival - 1e-3, qPrintable(QString::number(rec.stats.start - rec.stats.arrival)));
    // Stopping after two requests leaves the rest out.
    const auto stopped = run_workload(deploy(StrategyKind::Consolidated, 12, 1), burst,
                                      {.progress = [](std::size_t done, std::size_t) { return done < 2; }});
    QCOMPARE(stopped.size(), std::size_t(2));
    expect_mentions(error_of<InvalidArgument>([&] { run_workload(s, {{0, "nobody", {1}, 1}}); }), {"target 'nobody'"});
  }

  void aSharedEngineIsLentAndGivenBack() {
    // A run on a shared engine (the workbench's): other requests join its batches, and afterwards
    // the engine serves with its own runtime again.
    auto mine = std::make_shared<Runtime>(*store_, RuntimeConfig{});
    Engine engine(mine);
    auto d = deploy(StrategyKind::Consolidated);
    std::shared_ptr<RequestHandle> chat;
    const auto records = run_workload(d, alternating({"ft1", "base"}, 4),
                                      {.on_finished =
                                           [&](const RequestRecord&) {
                                             if (!chat) chat = engine.submit({"ft2", {.prompt = {4, 5, 6}, .max_new_tokens = 3}});
                                           },
                                       .engine = &engine});
    QCOMPARE(records.size(), std::size_t(4));
    QVERIFY(chat);
    QCOMPARE(chat->wait().finish, Finish::Length);
    QCOMPARE(engine.runtime(), mine);
    QVERIFY(!engine.clock()->is_virtual());
  }

  // One budget plans one layout: the workbench's Session and plan_layout (what `consolidate`, `serve
  // --variants --budget` and the sweeps' strategies call) keep the same positions, with the same room
  // for a second non-expert set, and record the budget and reserve they were planned under; by
  // capacity alone a layout records no budget. The sets counted from the folders are the store's.
  void oneBudgetPlansOneLayout() {
    qputenv("MOSAIC_CACHE_DIR", QByteArray::fromStdString(scratch("cache").string()));
    auto opened = Session::open({fixture("olmoe", "base"), fixture("olmoe", "ft1"), fixture("olmoe", "ft2")});
    QVERIFY(opened.ok());
    Session& s = **opened;
    QCOMPARE(non_expert_sets(s.family()), s.store().sets());
    for (const std::uint64_t budget : {s.default_budget(), s.default_budget() * 2}) {
      s.plan(budget, Policy::RoundRobin);
      const PlannedLayout p = plan_layout(s.family(), s.analysis(), non_expert_sets(s.family()), {.budget = budget, .reserve = s.reserve()});
      QCOMPARE(p.layout.plan.map, s.layout().plan.map);
      QCOMPARE(p.capacity->capacity, s.capacity().capacity);
      QCOMPARE(p.capacity->positions_for_sets, s.capacity().positions_for_sets);
      QCOMPARE(*p.layout.budget_bytes, budget);
      QCOMPARE(p.layout.reserve_spec->context_tokens, s.reserve().context_tokens);
    }
    // Its non-expert set costs 9 of its 24 positions, more than 1/8: auto keeps no room for a second
    // set here; asked for two, the plan gives up the positions one costs.
    const std::uint64_t budget = s.default_budget() * 2;
    const PlannedLayout one = plan_layout(s.family(), s.analysis(), 3, {.budget = budget, .reserve = s.reserve()});
    const PlannedLayout two = plan_layout(s.family(), s.analysis(), 3, {.budget = budget, .reserve = s.reserve(), .resident_sets = 2});
    QCOMPARE(one.capacity->positions_for_sets, std::int64_t(0));
    QVERIFY(two.capacity->positions_for_sets > 0);
    QCOMPARE(two.layout.plan.capacity, one.layout.plan.capacity - two.capacity->positions_for_sets);
    const PlannedLayout by_capacity = plan_layout(s.family(), s.analysis(), 3, {.capacity = 5});
    QCOMPARE(by_capacity.layout.plan.capacity, std::int64_t(5));
    QVERIFY(!by_capacity.layout.budget_bytes && !by_capacity.capacity);
    QVERIFY_THROWS_EXCEPTION(InvalidArgument, plan_layout(s.family(), s.analysis(), 3, {}));
    // Adapters share their base's set unless they store non-expert tensors.
    Family sample;
    const fs::path family_dir = fs::path(MOSAIC_RESOURCES) / "sample-family";
    open_family(sample, {family_dir / "base", family_dir / "bible", family_dir / "esft-bible", family_dir / "esft-jargon"});
    QCOMPARE(non_expert_sets(sample), HostStore(sample).sets());
    QCOMPARE(non_expert_sets(sample), 2);
  }

  void sessionServesWithinItsBudget() {
    qputenv("MOSAIC_CACHE_DIR", QByteArray::fromStdString(scratch("cache").string()));
    auto opened = Session::open({fixture("olmoe", "base"), fixture("olmoe", "ft1"), fixture("olmoe", "ft2")});
    QVERIFY(opened.ok());
    Session& s = **opened;
    s.plan(0, Policy::RoundRobin);
    const std::uint64_t budget = s.default_budget();
    QCOMPARE(*s.runtime().config().budget_bytes, budget);
    QVERIFY(s.runtime().budget().used() <= budget);
    const auto map = s.layout().plan.map;
    // A budget below the minimum is refused and leaves the session exactly as it was, serving.
    expect_mentions(error_of<BudgetError>([&] { s.plan(s.capacity().minimum_budget() - 1, Policy::RoundRobin); }), {"below the minimum"});
    QCOMPARE(s.layout().plan.map, map);
    QCOMPARE(*s.runtime().config().budget_bytes, budget);
    const auto h = s.engine().submit({"ft1", {.prompt = {1, 2, 3}, .max_new_tokens = 2}});
    QCOMPARE(h->wait().finish, Finish::Length);
    // A layout file whose copies do not fit the budget it names is refused the same way.
    Layout crowded = s.layout();
    crowded.budget_bytes = s.capacity().minimum_budget();
    expect_mentions(error_of<BudgetError>([&] { s.apply(crowded); }), {"device budget", "raise the budget"});
    QCOMPARE(s.layout().plan.map, map);
    // A layout planned with another reserve is served with it (as `mosaic-cli … --layout` serves it),
    // within the budget it names; a file from before the reserve was recorded, with the session's.
    QCOMPARE(s.layout().reserve_spec->context_tokens, s.reserve().context_tokens);
    Layout small = s.layout();
    small.reserve_spec = ReserveSpec{.context_tokens = 64, .prefill_chunk = 16};
    s.apply(small);
    QCOMPARE(s.reserve().context_tokens, std::int64_t(64));
    QCOMPARE(s.runtime().config().reserve.prefill_chunk, std::int64_t(16));
    QCOMPARE(*s.runtime().config().budget_bytes, budget);
    small.reserve_spec.reset();
    s.apply(small);
    QCOMPARE(s.reserve().context_tokens, std::int64_t(64));
    // One assembly (layout_serving.h): the file as the CLI, the sweeps and bench-quality serve it,
    // with the session's reserve, is the runtime the session built — budget, reserve and pins — and
    // the reserve the file records wins over the caller's, unless the caller names a budget.
    const auto same_as_session = [&](const RuntimeConfig& c) {
      const RuntimeConfig& held = s.runtime().config();
      return c.budget_bytes == held.budget_bytes && c.reserve.context_tokens == held.reserve.context_tokens &&
             c.reserve.prefill_chunk == held.reserve.prefill_chunk && c.reserve.miss_slots == held.reserve.miss_slots && c.pinned == held.pinned;
    };
    const std::vector<int> to_store = s.store().indices(s.family());
    QVERIFY(same_as_session(layout_config(small, to_store, s.store(), s.family(), {.reserve = s.reserve()})));
    small.reserve_spec = ReserveSpec{.context_tokens = 64, .prefill_chunk = 16};
    QVERIFY(same_as_session(layout_config(small, to_store, s.store(), s.family(), {.reserve = ReserveSpec{.context_tokens = 512}})));
    const RuntimeConfig asked = layout_config(small, to_store, s.store(), s.family(), {.budget = budget + 1, .reserve = ReserveSpec{.context_tokens = 512}});
    QVERIFY(asked.budget_bytes == budget + 1 && asked.reserve.context_tokens == 512);
    // The device: the CPU is a no-op; the GPU serves the same layout where there is one, and where
    // there is none is refused with the session still serving on the CPU.
    const Runtime* before = &s.runtime();
    s.set_device(Device::Cpu);
    QCOMPARE(&s.runtime(), before);
    if (const auto why = device_unavailable(Device::Cuda)) {
      expect_mentions(error_of<DeviceError>([&] { s.set_device(Device::Cuda); }), {"device cuda", *why, "cpu"});
      QVERIFY(s.device() == Device::Cpu && &s.runtime() == before && s.runtime().config().device == Device::Cpu);
      QCOMPARE(s.engine().submit({"ft2", {.prompt = {1, 2, 3}, .max_new_tokens = 2}})->wait().finish, Finish::Length);
    } else {
      s.set_device(Device::Cuda);
      const auto resident = static_cast<std::size_t>(std::count_if(map.begin(), map.end(), [](int v) { return v >= 0; }));
      QVERIFY(s.runtime().config().device == Device::Cuda && s.runtime().config().pinned.size() == resident);
      QCOMPARE(s.layout().plan.map, map);
      QCOMPARE(s.engine().submit({"ft2", {.prompt = {1, 2, 3}, .max_new_tokens = 2}})->wait().finish, Finish::Length);
      s.plan(0, Policy::Medoid);  // later plans stay on the device chosen
      QVERIFY(s.runtime().config().device == Device::Cuda);
      s.set_device(Device::Cpu);
      s.plan(0, Policy::RoundRobin);
    }
    // How the CPU backend holds weights: the layout on screen served read in place gives the same
    // tokens, and later plans keep it; refused under a host budget, with the session as it was.
    const std::vector<std::int64_t> stored = s.engine().submit({"ft2", {.prompt = {1, 2, 3}, .max_new_tokens = 4}})->wait().tokens;
    s.set_cpu_weights(CpuWeights::Mapped);
    QVERIFY(s.runtime().config().cpu_weights == CpuWeights::Mapped);
    QCOMPARE(s.layout().plan.map, map);
    QCOMPARE(s.engine().submit({"ft2", {.prompt = {1, 2, 3}, .max_new_tokens = 4}})->wait().tokens, stored);
    s.plan(0, Policy::Medoid);
    QVERIFY(s.runtime().config().cpu_weights == CpuWeights::Mapped);
    s.set_cpu_weights(CpuWeights::Stored);
    s.plan(0, Policy::RoundRobin);
    {
      auto budgeted = Session::open({fixture("olmoe", "base"), fixture("olmoe", "ft2")}, {}, std::uint64_t{1} << 30);
      QVERIFY2(budgeted.ok(), budgeted.error_message().c_str());
      (*budgeted)->plan(0, Policy::RoundRobin);
      const Runtime* held = &(*budgeted)->runtime();
      expect_mentions(error_of<InvalidArgument>([&] { (*budgeted)->set_cpu_weights(CpuWeights::Mapped); }), {"mapped", "host budget"});
      QVERIFY((*budgeted)->cpu_weights() == CpuWeights::Stored && &(*budgeted)->runtime() == held);
    }
    // One checkpoint opens too: its distances are all 0, and it plans and serves.
    auto single = Session::open({fixture("olmoe", "ft2")});
    QVERIFY2(single.ok(), single.error_message().c_str());
    (*single)->plan(0, Policy::RoundRobin);
    const auto one = (*single)->engine().submit({"ft2", {.prompt = {1, 2, 3}, .max_new_tokens = 2}});
    QCOMPARE(one->wait().tokens, generate(*own_[2], {.prompt = {1, 2, 3}, .max_new_tokens = 2}).tokens);
    // Cancelled opening is an outcome, not an error.
    const auto cancelled = Session::open({fixture("olmoe", "base"), fixture("olmoe", "ft3")}, [](std::int64_t, std::int64_t) { return false; });
    QVERIFY(cancelled.is_cancelled());
    const auto failed = Session::open({scratch("nowhere")});
    QVERIFY(failed.is_failed());
    QVERIFY(failed.error_message().find("nowhere") != std::string::npos);
  }

  void summaryArithmetic() {
    QCOMPARE(percentiles({}).p50, 0.0);
    std::vector<double> v;
    for (int i = 1; i <= 100; ++i) v.push_back(i);
    const Percentiles p = percentiles(v);
    QCOMPARE(p.p50, 50.0);
    QCOMPARE(p.p90, 90.0);
    QCOMPARE(p.p99, 99.0);
    QCOMPARE(p.mean, 50.5);
    std::vector<RequestRecord> records(2);
    records[0] = {.index = 0, .stats = {.arrival = 0, .start = 0, .first_token = 1, .finish = 3, .generated_tokens = 5}};
    records[1] = {.index = 1, .stats = {.arrival = 1, .start = 3, .first_token = 4, .finish = 7, .generated_tokens = 7}};
    records[0].stats.counters.layers = {{.hits = 3, .misses = 1}, {}};
    records[1].stats.counters.layers = {{.hits = 1, .misses = 3}, {}};
    const RunSummary s = summarize(records);
    QCOMPARE(s.makespan_seconds, 7.0);
    QCOMPARE(s.window_seconds, 1.0);  // arrivals end at 1 s; nothing completed by then
    QCOMPARE(s.completed_in_window, std::int64_t(0));
    QCOMPARE(s.requests_per_minute, 0.0);
    QCOMPARE(s.drain_seconds, 6.0);
    // Throughput counts what completes within the arrival window, per minute of it: one request a
    // second for 10 s, the last two finishing late (the drain), is 9 per 10 s, not 11 per 22 s.
    std::vector<RequestRecord> steady;
    for (int i = 0; i <= 10; ++i)
      steady.push_back({.index = i, .stats = {.arrival = 1.0 * i, .start = 1.0 * i, .first_token = i + 0.1,
                                              .finish = i < 9 ? i + 0.5 : 12.0 + i, .generated_tokens = 4}});
    const RunSummary t = summarize(steady);
    QCOMPARE(t.window_seconds, 10.0);
    QCOMPARE(t.completed_in_window, std::int64_t(9));
    QCOMPARE(t.requests_per_minute, 54.0);
    QCOMPARE(t.tokens_per_second, 3.6);
    QCOMPARE(t.drain_seconds, 12.0);
    QCOMPARE(s.ttft.mean, 2.0);        // 1 and 3
    QCOMPARE(s.turnaround.p99, 6.0);   // 3 and 6
    QCOMPARE(s.queue_wait.p90, 2.0);   // 0 and 2
    QCOMPARE(s.tpot.p50, 0.5);         // (3-1)/4 = 0.5 and (7-4)/6 = 0.5
    QCOMPARE(s.hit_rate_per_layer[0], 0.5);
    QVERIFY(std::isnan(s.hit_rate_per_layer[1]));
    // Arrivals at 0 and 1, finishes at 3 and 7: 1, 2, 1, 0 in the system.
    std::vector<double> in_system, completed;
    for (const Sample& x : time_series(records)) {
      if (x.name == "in_system") in_system.push_back(x.value);
      if (x.name == "completed") completed.push_back(x.value);
    }
    QCOMPARE(in_system, (std::vector<double>{1, 2, 1, 0}));
    QCOMPARE(completed, (std::vector<double>{1, 2}));
  }
  void sweepConfigs() {
    const fs::path cfg = fs::path(MOSAIC_TEST_DATA).parent_path().parent_path() / "sample_configs" / "paper-qos.json";
    const SweepConfig c = load_sweep_config(cfg);
    QCOMPARE(c.variants.size(), std::size_t(4));
    QVERIFY(fs::exists(c.variants[0] / "config.json"));  // resolved against the config's folder
    QCOMPARE(c.strategies.size(), std::size_t(7));
    QCOMPARE(c.strategies[0].kind, StrategyKind::Single);
    QCOMPARE(c.strategies[0].capacity, std::int64_t(12));  // offloaded as the others are
    QCOMPARE(c.strategies[1].kind, StrategyKind::SingleResident);
    QCOMPARE(c.workload.prompt.min, std::int64_t(20));
    QCOMPARE(c.workload.output.max, std::int64_t(25));
    auto bad = [&](const std::string& text) {
      std::ofstream(scratch("sweep.json")) << text;
      return error_of<Error>([&] { load_sweep_config(scratch("sweep.json")); });
    };
    const std::string head = R"({"schema": "mosaic.sweep/1", "variants": ["a", "b"], "rates": [1], )";
    // The paths a sweep names are checked as it loads, each named by its field (before a record is
    // opened: `bench` made an empty one and then said only the bare path).
    expect_mentions(bad(head + R"("strategies": [{"kind": "single"}]})"), {"sweep.json", "field 'variants[0]'", "does not exist", "config's folder"});
    fs::create_directories(scratch("a"));
    std::ofstream(scratch("b")) << "a file";
    expect_mentions(bad(head + R"("strategies": [{"kind": "single"}]})"), {"field 'variants[1]'", "a file, not a folder"});
    fs::remove(scratch("b"));
    fs::create_directories(scratch("b"));
    expect_mentions(bad(R"({"schema": "mosaic.sweep/1", "variants": ["a", "b"], "rates": [1], "clock": "simulated", "device_profile": "nope.json", "strategies": [{"kind": "single"}]})"),
                    {"field 'device_profile'", "nope.json", "does not exist"});
    expect_mentions(bad(head + R"("strategies": [{"kind": "virtual-experts", "budget": "1GiB", "calibration": "cal.txt"}]})"),
                    {"field 'strategies[0].calibration'", "cal.txt", "does not exist"});
    std::ofstream(scratch("cal.txt")) << "calibration text";
    expect_mentions(bad(head + R"("strategies": [{"kind": "magic"}]})"), {"sweep.json", "strategies[0].kind", "magic"});
    expect_mentions(bad(head + R"("strategies": [{"kind": "consolidated", "policy": "medoidd"}]})"), {"strategies[0].policy", "medoid"});
    expect_mentions(bad(head + R"("strategies": [{"kind": "consolidated", "policy": "hybrid"}]})"), {"strategies[0].policy", "is hybrid", "kind \"hybrid\""});
    expect_mentions(bad(head + R"("strategies": [{"kind": "consolidated", "shares": [1, -2]}]})"), {"strategies[0].shares", "positive"});
    expect_mentions(bad(head + R"("strategies": [{"kind": "consolidated", "budget": "lots"}]})"), {"strategies[0].budget"});
    expect_mentions(bad(head + R"("strategies": [{"kind": "esft", "miss": "never"}]})"), {"strategies[0].miss", "masked"});
    expect_mentions(bad(head + R"("strategies": [{"kind": "esft", "switching": "random"}]})"), {"strategies[0].switching"});
    expect_mentions(bad(head + R"("alpha": 0, "strategies": [{"kind": "single"}]})"), {"'alpha'", "(0, 1]"});
    std::ofstream(scratch("sweep.json")) << head + R"("strategies": [{"kind": "esft", "max_sequences": 4, "resident_sets": 2, "switching": "affinity", "max_wait_seconds": 0.5, "miss": "masked"}]})";
    const SweepConfig ok = load_sweep_config(scratch("sweep.json"));
    QCOMPARE(ok.strategies[0].kind, StrategyKind::Esft);
    QCOMPARE(ok.strategies[0].scheduler.max_sequences, std::int64_t(4));
    QCOMPARE(ok.strategies[0].scheduler.switching, SwitchPolicy::Affinity);
    QCOMPARE(ok.strategies[0].resident_sets, 2);
    QCOMPARE(ok.strategies[0].miss, std::string("masked"));
    QCOMPARE(ok.workload.alpha, 1.0);
    QVERIFY(!ok.strategies[0].scheduler.swap_ahead);  // not said: the engine decides (on where K ≥ 2)
    // The defaults: affinity admission, every set the targets use; "admission" is the newer spelling.
    std::ofstream(scratch("sweep.json")) << head + R"("strategies": [{"kind": "consolidated", "capacity": 4}, {"kind": "single", "admission": "fcfs", "resident_sets": "auto"}]})";
    const SweepConfig defaults = load_sweep_config(scratch("sweep.json"));
    QCOMPARE(defaults.strategies[0].scheduler.switching, SwitchPolicy::Affinity);
    QCOMPARE(defaults.strategies[0].resident_sets, RuntimeConfig::kAutoSets);
    QCOMPARE(defaults.strategies[1].scheduler.switching, SwitchPolicy::Fcfs);
    QCOMPARE(defaults.strategies[1].resident_sets, RuntimeConfig::kAutoSets);
    expect_mentions(bad(head + R"("strategies": [{"kind": "consolidated", "admission": "fcfs", "switching": "fcfs"}]})"), {"switching", "older name of admission"});
    expect_mentions(bad(head + R"("strategies": [{"kind": "consolidated", "resident_sets": "many"}]})"), {"strategies[0].resident_sets", "auto"});
    // Look-ahead swaps: on where a free set buffer can exist, recorded under their own name.
    std::ofstream(scratch("sweep.json")) << head + R"("strategies": [{"kind": "consolidated", "resident_sets": 2, "swap_ahead": true}]})";
    const SweepConfig ahead = load_sweep_config(scratch("sweep.json"));
    QVERIFY(ahead.strategies[0].scheduler.swap_ahead);
    QCOMPARE(strategy_label(ahead.strategies[0]), std::string("consolidated+ahead"));
    std::ofstream(scratch("sweep.json")) << head + R"("strategies": [{"kind": "consolidated", "miss": "prefetch", "resident_sets": 2, "swap_ahead": true}]})";
    QCOMPARE(strategy_label(load_sweep_config(scratch("sweep.json")).strategies[0]), std::string("consolidated+prefetch+ahead"));
    expect_mentions(bad(head + R"("strategies": [{"kind": "consolidated", "miss": "prefetched"}]})"),
                    {"strategies[0].miss", "transient, lru, prefetch, prefetch-always or masked"});
    expect_mentions(bad(head + R"("strategies": [{"kind": "consolidated", "resident_sets": 1, "swap_ahead": true}]})"), {"strategies[0].swap_ahead", "resident_sets 1"});
    expect_mentions(bad(head + R"("strategies": [{"kind": "space-sharing", "resident_sets": 2, "swap_ahead": true}]})"),
                    {"strategies[0].swap_ahead", "space-sharing"});
    expect_mentions(bad(head + R"("strategies": [{"kind": "consolidated", "resident_sets": 2, "swap_ahead": 1}]})"), {"swap_ahead", "true or false"});
    // How the CPU backend holds weights: every strategy's, bf16 as stored unless the config (or
    // bench --cpu-weights) says fp32, and what is recorded says so.
    QCOMPARE(c.strategies[0].cpu_weights, CpuWeights::Stored);
    std::ofstream(scratch("sweep.json")) << head + R"("cpu_weights": "fp32", "strategies": [{"kind": "consolidated", "capacity": 4}]})";
    SweepConfig widened = load_sweep_config(scratch("sweep.json"));
    QCOMPARE(widened.strategies[0].cpu_weights, CpuWeights::Fp32);
    {
      StrategyConfig sc = widened.strategies[0];
      sc.capacity = 12;
      const Deployment d(sc, family_, *store_, *analysis_, scratch(""));
      QCOMPARE(d.partitions()[0].runtime->config().cpu_weights, CpuWeights::Fp32);
    }
    set_sweep_cpu_weights(widened, CpuWeights::Stored);
    QCOMPARE(widened.strategies[0].cpu_weights, CpuWeights::Stored);
    QCOMPARE(nlohmann::json::parse(widened.text)["cpu_weights"].get<std::string>(), std::string("stored"));
    expect_mentions(bad(head + R"("cpu_weights": "bf16", "strategies": [{"kind": "single"}]})"), {"'cpu_weights'", "stored", "fp32"});
    const SweepConfig esft = load_sweep_config(cfg.parent_path() / "esft-skew.json");
    QCOMPARE(esft.targets.size(), std::size_t(4));
    QCOMPARE(esft.strategies.front().kind, StrategyKind::Esft);
    QCOMPARE(esft.workload.alpha, 0.3);
    expect_mentions(bad(head + R"("targets": [], "strategies": [{"kind": "single"}]})"), {"'targets'"});
    // A misspelt key is refused with the nearest valid one; a syntax error names its line.
    expect_mentions(bad(head + R"("duraton_seconds": 5, "strategies": [{"kind": "single"}]})"),
                    {"field 'duraton_seconds'", "did you mean 'duration_seconds'"});
    expect_mentions(bad(head + R"("strategies": [{"kind": "single", "max_sequence": 2}]})"),
                    {"strategies[0].field 'max_sequence'", "did you mean 'max_sequences'"});
    expect_mentions(bad("{\"schema\": \"mosaic.sweep/1\",\n \"variants\": [\"a\" \"b\"]}"), {"line 2", "not valid JSON"});

    expect_mentions(bad(head + R"("prompt": [5, 2], "strategies": [{"kind": "single"}]})"), {"'prompt'", "min ≤ max"});
    // A second probe's findings: truncation, unbounded runs, a wrong type, nesting without end.
    expect_mentions(bad(head + R"("prompt": [4294967301, 4294967301], "strategies": [{"kind": "single"}]})"), {"'prompt'"});
    expect_mentions(bad(head + R"("repeats": 1e10, "strategies": [{"kind": "single"}]})"), {"'repeats'"});
    expect_mentions(bad(head + R"("repeats": 2.5, "strategies": [{"kind": "single"}]})"), {"'repeats'", "integer"});
    expect_mentions(bad(R"({"schema": "mosaic.sweep/1", "variants": ["a", "b"], "rates": [1000000], "duration_seconds": 60, "strategies": [{"kind": "single"}]})"),
                    {"'rates'", "at most"});
    expect_mentions(bad(head + R"("rates": [2], "strategies": [{"kind": "single"}]})"), {"'rates'", "twice"});  // a repeated key
    expect_mentions(bad(head + R"("strategies": [{"kind": "single", "max_sequences": 18446744073709551615}]})"), {"max_sequences"});
    expect_mentions(bad(head + R"("strategies": [{"kind": "single", "resident_sets": 2147483648}]})"), {"resident_sets", "1024"});
    expect_mentions(bad(head + R"("strategies": [{"kind": "consolidated", "kv_context": 1099511627776}]})"), {"kv_context"});
    expect_mentions(bad(R"({"schema": "mosaic.sweep/1", "variants": ["a", "b"], "rates": [1e300], "strategies": [{"kind": "single"}]})"),
                    {"'rates'", "at most"});
    expect_mentions(bad(head + R"("strategies": [{"kind": "single", "hit": 5}]})"), {"sweep.json", "wrong type"});
    expect_mentions(bad(head + R"("description": )" + std::string(100000, '[') + std::string(100000, ']') + R"(, "strategies": [{"kind": "single"}]})"),
                    {"sweep.json", "deeper than"});
    expect_mentions(bad(R"({"schema": "mosaic.sweep/1", "variants": ["a"], "rates": [1], "strategies": []})"), {"'variants'"});
    expect_mentions(bad(R"({"schema": "mosaic.sweep/9"})"), {"mosaic.sweep/9"});
    // virtual-experts: its own keys, a calibration path resolved against the config, a budget to plan for.
    std::ofstream(scratch("sweep.json")) << head + R"("strategies": [{"kind": "virtual-experts", "budget": "1GiB", "calibration": "cal.txt", "staging": 2, "update_every": 4, "decay": 0.5}]})";
    const SweepConfig v = load_sweep_config(scratch("sweep.json"));
    QCOMPARE(v.strategies[0].kind, StrategyKind::VirtualExperts);
    QCOMPARE(v.strategies[0].calibration, scratch("cal.txt"));
    QCOMPARE(v.strategies[0].updates.staging, std::int64_t(2));
    QCOMPARE(v.strategies[0].updates.update_every, std::int64_t(4));
    QCOMPARE(v.strategies[0].updates.decay, 0.5);
    QCOMPARE(v.strategies[0].miss, std::string("masked"));
    expect_mentions(bad(head + R"("strategies": [{"kind": "consolidated", "capacity": 4, "staging": 2}]})"), {"strategies[0].staging", "virtual-experts"});
    expect_mentions(bad(head + R"("strategies": [{"kind": "virtual-experts", "calibration": "cal.txt", "capacity": 4}]})"), {"strategies[0].calibration", "budget"});
    expect_mentions(bad(head + R"("strategies": [{"kind": "virtual-experts"}]})"), {"strategies[0]", "budget", "capacity"});
    expect_mentions(bad(head + R"("strategies": [{"kind": "virtual-experts", "capacity": 4, "shift": 2}]})"), {"strategies[0].shift", "is 2", "above 0 and at most 1"});
  }

  // The typed field reader every parser uses: the value shown, the rule in words, the field named
  // with its prefix; integers never wrap; a missing field is a MissingError, a fallback when given.
  void typedFieldsAreReadAlikeEverywhere() {
    const nlohmann::json j = nlohmann::json::parse(
        R"({"n": 100, "neg": -5, "big": 18446744073709551615, "half": 0.5, "inf": "x", "name": "", "zero": 0, "list": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]})");
    const JsonFields f(j, JsonFields::format_error("cfg.json", "see the sample"), "part.");
    QCOMPARE(f.integer("n", 1, 100), std::int64_t(100));
    expect_mentions(error_of<FormatError>([&] { f.integer("n", 1, 64); }), {"cfg.json", "'part.n'", "is 100", "an integer from 1 to 64", "see the sample"});
    expect_mentions(error_of<FormatError>([&] { f.integer("neg", 0, 10); }), {"'part.neg'", "is -5"});
    expect_mentions(error_of<FormatError>([&] { f.integer("big", 0, std::int64_t{1} << 53); }), {"is 18446744073709551615"});
    expect_mentions(error_of<FormatError>([&] { f.integer("half", 0, 1); }), {"is 0.5", "an integer"});
    expect_mentions(error_of<MissingError>([&] { f.integer("absent", 0, 1); }), {"'part.absent'", "is missing"});
    QCOMPARE(f.integer("absent", 0, 1, 1), std::int64_t(1));
    QCOMPARE(f.number("half", 0, 1), 0.5);
    expect_mentions(error_of<FormatError>([&] { f.number("half", 0.001, 0.25); }), {"a number from 0.001 to 0.25"});
    expect_mentions(error_of<FormatError>([&] { f.number("zero", 0, 1, std::nullopt, true); }), {"is 0", "above 0 and at most 1"});
    expect_mentions(error_of<FormatError>([&] { f.number("inf", 0, 1); }), {"is \"x\"", "a number"});
    expect_mentions(error_of<FormatError>([&] { f.number_from("zero", 0, true); }), {"a positive number"});
    QCOMPARE(f.number_from("zero", 0, false), 0.0);
    expect_mentions(error_of<FormatError>([&] { f.text("name", true); }), {"'part.name'", "a non-empty string"});
    QCOMPARE(f.text("name", false), std::string());
    expect_mentions(error_of<FormatError>([&] { f.text("list", false); }), {"is [1,2,3,4,5,6,7,8,9,10,11,12,13,", "...; it must be a string"});
  }

  // Session files with a field of another JSON type are typed errors, never the JSON library's
  // exception (the fuzzer found an array where the schema string belongs).
  void sessionFilesOfWrongTypes() {
    auto error = [](const std::string& text) {
      try {
        parse_session_file(text, "session.json", "/base");
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string("accepted");
    };
    expect_mentions(error(R"({"schema": ["../b"], "variants": ["a"]})"), {"session.json", "schema", R"(["../b"])"});
    expect_mentions(error(R"({"schema": 5, "variants": ["a"]})"), {"session.json", "schema", "is '5'", "sample-session.json"});
    expect_mentions(error(R"({"variants": ["a"]})"), {"schema", "missing"});
    expect_mentions(error(R"({"schema": "mosaic.session/1", "variants": [7]})"), {"session.json", "wrong type"});
    expect_mentions(error(R"({"schema": "mosaic.session/1", "variants": ["a"], "reserve": {"requests": -3}})"), {"reserve.requests", "from 1"});
    QCOMPARE(parse_session_file(R"({"schema": "mosaic.session/1", "variants": ["a"]})", "s.json", "/base").variants.front(), fs::path("/base/a"));
    // The device the family is served on: cpu unless the file says cuda, and written back only then.
    QVERIFY(parse_session_file(R"({"schema": "mosaic.session/1", "variants": ["a"]})", "s.json", "/base").device == Device::Cpu);
    expect_mentions(error(R"({"schema": "mosaic.session/1", "variants": ["a"], "device": "tpu"})"), {"session.json", "device", "cpu or cuda"});
    SessionFile gpu = parse_session_file(R"({"schema": "mosaic.session/1", "variants": ["a"], "device": "cuda"})", "s.json", "/base");
    QVERIFY(gpu.device == Device::Cuda);
    save_session_file(scratch("gpu-session.json"), gpu);
    QVERIFY(load_session_file(scratch("gpu-session.json")).device == Device::Cuda);
    gpu.device = Device::Cpu;
    save_session_file(scratch("cpu-session.json"), gpu);
    QVERIFY(!nlohmann::json::parse(std::ifstream(scratch("cpu-session.json"))).contains("device"));
    // The host budget: bytes, or absent (every weight in RAM); written back only when there is one.
    QVERIFY(!load_session_file(scratch("cpu-session.json")).host_budget_bytes);
    gpu.host_budget_bytes = 3ull << 30;
    save_session_file(scratch("host-session.json"), gpu);
    QCOMPARE(load_session_file(scratch("host-session.json")).host_budget_bytes, std::optional<std::uint64_t>(3ull << 30));
    expect_mentions(error(R"({"schema": "mosaic.session/1", "variants": ["a"], "host_budget_bytes": "lots"})"), {"session.json", "host_budget_bytes", "bytes"});
    // How the CPU backend holds weights: stored unless the file says otherwise, written back only then.
    QVERIFY(load_session_file(scratch("cpu-session.json")).cpu_weights == CpuWeights::Stored);
    QVERIFY(!nlohmann::json::parse(std::ifstream(scratch("cpu-session.json"))).contains("cpu_weights"));
    gpu.cpu_weights = CpuWeights::Mapped;
    save_session_file(scratch("mapped-session.json"), gpu);
    QVERIFY(load_session_file(scratch("mapped-session.json")).cpu_weights == CpuWeights::Mapped);
    expect_mentions(error(R"({"schema": "mosaic.session/1", "variants": ["a"], "cpu_weights": "int4"})"),
                    {"session.json", "cpu_weights", "stored, fp32 or mapped"});
  }
};

QTEST_GUILESS_MAIN(TestServing)
#include "tst_serving.moc"
