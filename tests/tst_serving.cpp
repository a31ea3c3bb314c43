// QoS serving: the Poisson workload's statistics and determinism, traces, each strategy's
// semantics on a real fixture family, both runner clocks, and the run summary's arithmetic.
#include <QTemporaryDir>
#include <QTest>

#include <cmath>
#include <fstream>

#include "analysis/merge.h"
#include "common/error.h"
#include "serving/runner.h"
#include "serving/sweep.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

class TestServing : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  Family family_;
  std::unique_ptr<HostStore> store_;
  std::optional<FamilyAnalysis> analysis_;

  fs::path scratch(const std::string& name) const { return fs::path(tmp_.path().toStdString()) / name; }
  // Requests alternating over the given targets, 1 s apart, 4 prompt and 3 output tokens.
  static std::vector<WorkloadRequest> alternating(const std::vector<std::string>& targets, int n) {
    std::vector<WorkloadRequest> w;
    for (int i = 0; i < n; ++i)
      w.push_back({static_cast<double>(i), targets[static_cast<std::size_t>(i) % targets.size()], {11, 22, 33, 44}, 3});
    return w;
  }
  StrategyServer server(StrategyKind kind, std::int64_t capacity = 12) {
    return StrategyServer({.kind = kind, .capacity = capacity}, family_, *store_, *analysis_, scratch(""));
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    for (const char* v : {"base", "ft1", "ft2"}) family_.add(v, fixture("olmoe", v));
    store_ = std::make_unique<HostStore>(family_);
    analysis_ = analyze_family(family_);
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
    WorkloadSpec spec{.targets = {"a", "b", "c"}, .total_rate = 7, .alpha = 1.0, .duration_seconds = 50,
                      .prompt = {5, 9}, .output = {1, 4}, .vocab_size = 64, .seed = 3};
    const auto a = generate_workload(spec), b = generate_workload(spec);
    QCOMPARE(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      QCOMPARE(a[i].arrival, b[i].arrival);
      QCOMPARE(a[i].prompt, b[i].prompt);
      QVERIFY(a[i].prompt.size() >= 5 && a[i].prompt.size() <= 9 && a[i].max_new_tokens >= 1 && a[i].max_new_tokens <= 4);
      for (auto id : a[i].prompt) QVERIFY(id >= 0 && id < 64);
    }
    // Shares ∝ 1, 1/2, 1/3.
    const auto shares = power_law_shares(3, 1.0);
    QVERIFY(std::abs(shares[0] - 6.0 / 11) < 1e-12 && std::abs(shares[2] - 2.0 / 11) < 1e-12);
    QCOMPARE(target_rates(spec)[1], 7 * 3.0 / 11);
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
  }

  void consolidatedSwapsAndNoReconfigNever() {
    auto consolidated = server(StrategyKind::Consolidated), fixed = server(StrategyKind::NoReconfig);
    const auto w = alternating({"ft1", "ft1", "ft2", "base"}, 8);
    const auto a = run_workload(consolidated, w), b = run_workload(fixed, w);
    std::int64_t swaps = 0;
    for (const auto& r : a) swaps += r.counters.swaps;
    QCOMPARE(swaps, std::int64_t(6));  // warm on base: ft1 ft1 ft2 base ft1 ft1 ft2 base → 6 changes
    for (const auto& r : b) QCOMPARE(r.counters.swaps, std::int64_t(0));
    QVERIFY(summarize(b).swap_bytes == 0);
  }

  void timeSharingMovesTheWholeModelOnEveryMismatch() {
    auto ts = server(StrategyKind::TimeSharing);
    const auto w = alternating({"base", "ft1", "ft1", "ft2"}, 8);  // mismatches at 1, 3, 4, 5, 7
    const auto records = run_workload(ts, w);
    const std::uint64_t whole = store_->non_expert_bytes() + static_cast<std::uint64_t>(3 * 8) * store_->expert_bytes();
    std::string prev = "base";
    for (const auto& r : records) {
      const bool mismatch = r.target != prev;
      QCOMPARE(r.counters.swaps, std::int64_t(mismatch));
      QCOMPARE(r.counters.swap_bytes, mismatch ? whole : 0);
      QCOMPARE(r.counters.total().misses, std::int64_t(0));  // the whole model is resident
      prev = r.target;
    }
    // The tokens are each variant's own.
    const auto own = generate(store_->model(2), {.prompt = {11, 22, 33, 44}, .max_new_tokens = 3});
    QCOMPARE(ts.serve({0, "ft2", {11, 22, 33, 44}, 3}).tokens, own.tokens);
  }

  void spaceSharingPartitionsKeepToTheirShare() {
    const std::uint64_t eb = store_->expert_bytes(), ne = store_->non_expert_bytes();
    // Room per partition: its non-expert set, 4 pinned experts, 2 scratch slots × 3 layers, KV for 8 tokens.
    const std::uint64_t per = ne + (4 + 6) * eb + 2 * 3 * 2 * 16 * 8 * 4 + 4096;
    StrategyServer ss({.kind = StrategyKind::SpaceSharing, .capacity = 12, .budget_bytes = 3 * per}, family_, *store_,
                      *analysis_, scratch(""));
    QCOMPARE(ss.lanes(), std::size_t(3));
    const auto records = run_workload(ss, alternating({"base", "ft1", "ft2"}, 6));
    for (std::size_t lane = 0; lane < 3; ++lane) {
      const Runtime& rt = ss.runtime(lane);
      QVERIFY(rt.budget().peak() <= per);
      QCOMPARE(rt.budget().budget(), per);
      QCOMPARE(rt.options().copy_slowdown, 3.0);
      std::int64_t pinned = 0;
      for (std::int64_t l = 0; l < 3; ++l) {
        pinned += rt.slots(l).count(SlotPool::Role::Pinned);
        for (std::int64_t s = 0; s < rt.slots(l).count(SlotPool::Role::Pinned); ++s)
          QCOMPARE(rt.slots(l).source(s).variant, static_cast<int>(lane));  // only its own variant's experts
      }
      QCOMPARE(pinned, std::int64_t(4));
    }
    for (const auto& r : records) {
      QCOMPARE(r.lane, ss.lane_of(r.target));
      QCOMPARE(r.counters.swaps, std::int64_t(0));  // each partition keeps its variant
    }
    expect_mentions(error_of<BudgetError>([&] {
      StrategyServer({.kind = StrategyKind::SpaceSharing, .capacity = 12, .budget_bytes = 3 * ne}, family_, *store_, *analysis_, scratch(""));
    }), {"expert slots"});
  }

  void singleAndAveragingServeOneModel() {
    StrategyServer single({.kind = StrategyKind::Single, .single_target = "ft2"}, family_, *store_, *analysis_, scratch(""));
    const WorkloadRequest any{0, "base", {11, 22, 33, 44}, 3};
    QCOMPARE(single.serve(any).tokens, generate(store_->model(2), {.prompt = any.prompt, .max_new_tokens = 3}).tokens);
    auto avg = server(StrategyKind::Averaging);
    write_averaged(family_, scratch("avg-ref"));
    const auto merged = Model::load(Checkpoint(scratch("avg-ref")));
    const auto served = avg.serve(any);
    QCOMPARE(served.tokens, generate(*merged, {.prompt = any.prompt, .max_new_tokens = 3}).tokens);
    QCOMPARE(served.counters.total().misses, std::int64_t(0));
    QCOMPARE(avg.serve({0, "ft1", any.prompt, 3}).tokens, served.tokens);  // every target, one model
  }

  void virtualAndRealClocks() {
    auto s = server(StrategyKind::Consolidated);
    // Virtual: a burst at t = 0 queues; each starts when the previous finished.
    std::vector<WorkloadRequest> burst(5, WorkloadRequest{0.0, "ft1", {1, 2, 3}, 4});
    const auto v = run_workload(s, burst);
    QCOMPARE(v.size(), std::size_t(5));
    for (std::size_t i = 1; i < v.size(); ++i) {
      QCOMPARE(v[i].start, v[i - 1].finish);
      QVERIFY(v[i].queue_wait() > 0 && v[i].first_token > v[i].start && v[i].finish >= v[i].first_token);
    }
    // Real: spaced arrivals are served after they arrive, on the wall clock.
    std::vector<WorkloadRequest> spaced;
    for (int i = 0; i < 4; ++i) spaced.push_back({0.05 * i, i % 2 ? "ft2" : "base", {1, 2, 3}, 2});
    std::vector<std::int64_t> finished;
    const auto r = run_workload(s, spaced, {.clock = RunClock::Real, .on_finished = [&](const RequestRecord& rec) { finished.push_back(rec.index); }});
    QCOMPARE(r.size(), std::size_t(4));
    QCOMPARE(finished, (std::vector<std::int64_t>{0, 1, 2, 3}));
    for (const auto& rec : r) QVERIFY2(rec.start >= rec.arrival - 1e-3, qPrintable(QString::number(rec.start - rec.arrival)));
    // Stopping after two requests leaves the rest unserved.
    const auto stopped = run_workload(s, burst, {.progress = [](std::size_t done, std::size_t) { return done < 2; }});
    QCOMPARE(stopped.size(), std::size_t(2));
    expect_mentions(error_of<InvalidArgument>([&] { run_workload(s, {{0, "nobody", {1}, 1}}); }), {"target 'nobody'"});
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
    records[0] = {.index = 0, .arrival = 0, .start = 0, .first_token = 1, .finish = 3, .output_tokens = 5};
    records[1] = {.index = 1, .arrival = 1, .start = 3, .first_token = 4, .finish = 7, .output_tokens = 7};
    records[0].counters.layers = {{.hits = 3, .misses = 1}, {}};
    records[1].counters.layers = {{.hits = 1, .misses = 3}, {}};
    const RunSummary s = summarize(records);
    QCOMPARE(s.makespan_seconds, 7.0);
    QCOMPARE(s.requests_per_minute, 60.0 * 2 / 7);
    QCOMPARE(s.tokens_per_second, 12.0 / 7);
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
    QCOMPARE(c.strategies.size(), std::size_t(6));
    QCOMPARE(c.workload.prompt.min, std::int64_t(20));
    QCOMPARE(c.workload.output.max, std::int64_t(25));
    auto bad = [&](const std::string& text) {
      std::ofstream(scratch("sweep.json")) << text;
      return error_of<Error>([&] { load_sweep_config(scratch("sweep.json")); });
    };
    const std::string head = R"({"schema": "mosaic.sweep/1", "variants": ["a", "b"], "rates": [1], )";
    expect_mentions(bad(head + R"("strategies": [{"kind": "magic"}]})"), {"sweep.json", "strategies[0].kind", "magic"});
    expect_mentions(bad(head + R"("strategies": [{"kind": "consolidated", "budget": "lots"}]})"), {"strategies[0].budget"});
    expect_mentions(bad(head + R"("prompt": [5, 2], "strategies": [{"kind": "single"}]})"), {"'prompt'", "min ≤ max"});
    expect_mentions(bad(R"({"schema": "mosaic.sweep/1", "variants": ["a"], "rates": [1], "strategies": []})"), {"'variants'"});
    expect_mentions(bad(R"({"schema": "mosaic.sweep/9"})"), {"mosaic.sweep/9"});
  }
};

QTEST_GUILESS_MAIN(TestServing)
#include "tst_serving.moc"
