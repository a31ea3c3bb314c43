// The multi-variant runtime: for every hit and miss policy its logits for a target equal those of
// the consolidated-merge checkpoint (consolidated hits) or of the target itself (strict hits), on
// every fixture family, for the planner's layouts and random ones; with every expert resident it is
// the plain forward pass; and its counters, swaps and budget behave as specified.
#include <QTemporaryDir>
#include <QTest>

#include <random>

#include "analysis/family_analysis.h"
#include "analysis/merge.h"
#include "common/error.h"
#include "runtime/runtime.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

namespace {

const std::vector<std::int64_t> kIds{165, 299, 204, 8, 63, 73, 11, 261, 79, 192, 208, 129};

std::vector<float> logits(const Model& m) {
  KvCache cache(m.spec(), 1, static_cast<std::int64_t>(kIds.size()));
  return forward(m, cache, kIds, LogitsFor::AllPositions).values;
}

std::vector<float> logits(Runtime& rt, int target, RuntimeCounters& counters) {
  KvCache cache(rt.store().spec(), 1, static_cast<std::int64_t>(kIds.size()));
  return rt.forward(target, cache, kIds, LogitsFor::AllPositions, counters).values;
}

Layout layout_for(const Family& f, const ExpertDistances& d, const std::vector<std::string>& sha256, std::int64_t capacity) {
  return make_layout(f, sha256, plan_consolidation(d, capacity, Policy::RoundRobin));
}

// Any variant's copy (or none) at each position, uniformly at random.
Layout random_layout(Layout layout, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::int64_t residents = 0;
  for (int& v : layout.plan.map) {
    v = static_cast<int>(rng() % static_cast<std::uint64_t>(layout.plan.variants + 1)) - 1;
    residents += v >= 0;
  }
  layout.plan.capacity = residents;
  return layout;
}

}  // namespace

class TestRuntime : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  fs::path scratch(const std::string& name) const { return fs::path(tmp_.path().toStdString()) / name; }

  struct Setup {
    Family family;
    std::unique_ptr<HostStore> store;
    std::vector<std::string> sha256;
    ExpertDistances distances;
  };
  static std::unique_ptr<Setup> open(const std::string& fam, std::vector<std::string> names = {}) {
    if (names.empty()) names = variants();
    auto s = std::make_unique<Setup>();
    for (const auto& v : names) s->family.add(v, fixture(fam, v));
    s->store = std::make_unique<HostStore>(s->family);
    if (names.size() > 1) {
      const auto a = analyze_family(s->family);
      s->sha256 = a->sha256;
      s->distances = a->distances;
    }
    return s;
  }

 private Q_SLOTS:
  void initTestCase() { QVERIFY(tmp_.isValid()); }

  void equalsTheConsolidatedMerge_data() {
    QTest::addColumn<QString>("family");
    QTest::addColumn<int>("layoutSeed");  // 0: the planner's layout
    for (const auto& f : families())
      for (int seed : {0, 7}) QTest::newRow((f + (seed ? "/random" : "/planned")).c_str()) << QString::fromStdString(f) << seed;
  }
  void equalsTheConsolidatedMerge() {
    QFETCH(QString, family);
    QFETCH(int, layoutSeed);
    const std::string fam = family.toStdString();
    const auto s = open(fam);
    Layout layout = layout_for(s->family, s->distances, s->sha256, 10);
    if (layoutSeed) layout = random_layout(layout, static_cast<std::uint64_t>(layoutSeed));
    const auto to_store = match_layout(layout, s->family, s->sha256, "test layout");
    const ModelSpec& spec = s->store->spec();

    // References: the consolidated-merge checkpoint of every target, and the target itself.
    std::vector<std::vector<float>> merged, own;
    for (int t = 0; t < s->store->variants(); ++t) {
      const fs::path dir = scratch(fam + "-" + std::to_string(layoutSeed) + "-" + s->store->name(t));
      write_consolidated(s->family, layout, s->store->name(t), dir);
      merged.push_back(logits(*Model::load(Checkpoint(dir))));
      own.push_back(logits(s->store->model(t)));
    }
    for (HitPolicy hit : {HitPolicy::Consolidated, HitPolicy::Strict})
      for (MissPolicy miss : {MissPolicy::Transient, MissPolicy::Lru}) {
        Runtime rt(*s->store, layout, to_store, {.hit = hit, .miss = miss});
        // Twice round, in an order that swaps at every request, so LRU state carries over.
        for (int round = 0; round < 2; ++round)
          for (int t = 0; t < s->store->variants(); ++t) {
            RuntimeCounters c = rt.new_counters();
            const auto got = logits(rt, t, c);
            const auto& want = hit == HitPolicy::Consolidated ? merged[static_cast<std::size_t>(t)] : own[static_cast<std::size_t>(t)];
            const double err = relative_error(got, want);
            QVERIFY2(err <= 1e-4, qPrintable(QStringLiteral("%1/%2 target %3: %4").arg(QString::fromUtf8(hit_policy_name(hit).data()),
                                                                                   QString::fromUtf8(miss_policy_name(miss).data())).arg(t).arg(err)));
            // Every routed (token, expert) pair of every MoE layer is a hit or a miss.
            for (std::int64_t l = 0; l < spec.num_layers; ++l)
              QCOMPARE(c.layers[static_cast<std::size_t>(l)].hits + c.layers[static_cast<std::size_t>(l)].misses,
                       spec.is_sparse(l) ? static_cast<std::int64_t>(kIds.size()) * spec.top_k : 0);
            QCOMPARE(c.swaps, std::int64_t(1));
            QCOMPARE(c.swap_bytes, s->store->non_expert_bytes());
          }
      }
  }

  void allExpertsResidentIsThePlainForward() {
    // One variant with every expert resident: the same numbers as the single-model forward.
    const auto s = open("qwen2_moe", {"ft2"});
    Layout layout;
    layout.variants = {{"ft2", "", ""}};
    layout.plan.layers = s->store->spec().num_layers;
    layout.plan.experts = s->store->spec().num_experts;
    layout.plan.variants = 1;
    layout.plan.map.assign(static_cast<std::size_t>(layout.plan.layers * layout.plan.experts), 0);
    layout.plan.capacity = static_cast<std::int64_t>(layout.plan.map.size());
    Runtime rt(*s->store, layout, {0});
    RuntimeCounters c = rt.new_counters();
    QCOMPARE(logits(rt, 0, c), logits(s->store->model(0)));
    QCOMPARE(c.total().misses, std::int64_t(0));
    QCOMPARE(c.total().loads, std::int64_t(0));

    // Several variants, nothing pinned, strict hits and LRU spares for every expert of every
    // variant: the first pass loads, the second is all hits, and both are the target's own model.
    const auto many = open("olmoe", {"base", "ft1", "ft2"});
    Layout empty = layout_for(many->family, many->distances, many->sha256, 0);
    Runtime lru(*many->store, empty, {0, 1, 2},
                {.hit = HitPolicy::Strict, .miss = MissPolicy::Lru, .budget_bytes = std::uint64_t(1) << 30});
    QCOMPARE(lru.slots(0).count(SlotPool::Role::Spare), std::int64_t(8 * 3));  // capped at E × variants
    for (int t = 0; t < 3; ++t) {
      RuntimeCounters first = lru.new_counters(), second = lru.new_counters();
      const auto a = logits(lru, t, first), b = logits(lru, t, second);
      QCOMPARE(a, b);
      QVERIFY(relative_error(a, logits(many->store->model(t))) <= 1e-6);
      QVERIFY(first.total().misses > 0);
      QCOMPARE(second.total().misses, std::int64_t(0));
    }
  }

  void transientMissesLeaveNothingBehind() {
    const auto s = open("mixtral", {"base", "ft1", "ft2"});
    const Layout layout = layout_for(s->family, s->distances, s->sha256, 6);
    Runtime rt(*s->store, layout, match_layout(layout, s->family, s->sha256, "l"), {.miss = MissPolicy::Transient, .miss_slots = 1});
    RuntimeCounters c = rt.new_counters();
    logits(rt, 1, c);
    const LayerCounts t = c.total();
    QVERIFY(t.misses > 0 && t.loads > 0);
    QVERIFY(t.loads <= t.misses);  // one load serves every token routed to that expert in the step
    QCOMPARE(t.load_bytes, static_cast<std::uint64_t>(t.loads) * s->store->expert_bytes());
    for (std::int64_t l = 0; l < 3; ++l) {
      const SlotPool& pool = rt.slots(l);
      QCOMPARE(pool.count(SlotPool::Role::Scratch), std::int64_t(1));
      for (std::int64_t slot = 0; slot < pool.size(); ++slot)
        QCOMPARE(pool.source(slot).empty(), pool.role(slot) == SlotPool::Role::Scratch);
    }
    // The reroute table maps exactly the pinned copies, for every target (consolidated hits).
    std::int64_t mapped = 0;
    for (std::int64_t l = 0; l < 3; ++l)
      for (int target = 0; target < 3; ++target)
        for (std::int64_t e = 0; e < 8; ++e) mapped += rt.reroute(l).at(target, e) != RerouteTable::kMiss;
    QCOMPARE(mapped, std::int64_t(6 * 3));
  }

  void swapsOnlyOnAChangeOfVariant() {
    const auto s = open("olmoe", {"base", "ft1"});
    const Layout layout = layout_for(s->family, s->distances, s->sha256, 4);
    Runtime rt(*s->store, layout, {0, 1});
    RuntimeCounters c = rt.new_counters();
    QCOMPARE(rt.resident_variant(), -1);
    rt.reconfigure(1, c);
    rt.reconfigure(1, c);
    QCOMPARE(c.swaps, std::int64_t(1));
    rt.reconfigure(0, c);
    QCOMPARE(c.swaps, std::int64_t(2));
    QCOMPARE(c.swap_bytes, 2 * s->store->non_expert_bytes());
    QCOMPARE(rt.resident_variant(), 0);
    expect_mentions(error_of<InvalidArgument>([&] { rt.reconfigure(2, c); }), {"target 2"});
  }

  void budgetIsEnforced() {
    const auto s = open("olmoe", {"base", "ft1"});
    const Layout layout = layout_for(s->family, s->distances, s->sha256, 10);
    const std::uint64_t ne = s->store->non_expert_bytes(), eb = s->store->expert_bytes();
    // Non-expert set + 10 pinned + 2 scratch per layer × 3 layers.
    const std::uint64_t need = ne + (10 + 2 * 3) * eb;
    Runtime exact(*s->store, layout, {0, 1}, {.budget_bytes = need});
    QCOMPARE(exact.budget().used(), need);
    expect_mentions(error_of<BudgetError>([&] { Runtime tight(*s->store, layout, {0, 1}, {.budget_bytes = need - 1}); }),
                    {"expert slots of layer 2", "raise the budget"});
    expect_mentions(error_of<BudgetError>([&] { Runtime tiny(*s->store, layout, {0, 1}, {.budget_bytes = ne / 2}); }),
                    {"non-expert weights"});
    // A request whose KV cache does not fit fails; the budget is whole again afterwards.
    RuntimeCounters c = exact.new_counters();
    GenerationRequest req{.prompt = {1, 2, 3}, .max_new_tokens = 4};
    expect_mentions(error_of<BudgetError>([&] { exact.generate(0, req, c); }), {"KV cache of 7 tokens"});
    QCOMPARE(exact.budget().used(), need);
    expect_mentions(error_of<InvalidArgument>([&] { Runtime none(*s->store, layout, {0, 1}, {.miss_slots = 0}); }),
                    {"miss slots"});
  }
};

QTEST_GUILESS_MAIN(TestRuntime)
#include "tst_runtime.moc"
