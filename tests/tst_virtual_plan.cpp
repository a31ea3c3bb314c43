// SwapMoE's memory planner: the dynamic program is exact (checked against every configuration of
// random small problems); on the sample family the plan fits its budget to the byte as the runtime
// charges it, leaves room for another expert only where one would not lower the loss, beats uniform counts on its calibration objective
// and in the measured NLL, and round-trips through the layout file, whose virtual section is
// validated field by field.
#include <QTemporaryDir>
#include <QTest>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>

#include "analysis/family_analysis.h"
#include "analysis/virtual_plan.h"
#include "common/error.h"
#include "common/text_file.h"
#include "model/tokenizer.h"
#include "model/variant_folders.h"
#include "runtime/device_plan.h"
#include "runtime/miss_policy.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

namespace {

fs::path sample_family() { return fs::path(MOSAIC_RESOURCES) / "sample-family"; }

// The least summed loss over every configuration that fits, by enumeration.
double brute_force(const std::vector<std::vector<std::int64_t>>& slots, const std::vector<std::vector<double>>& loss, std::int64_t available,
                   std::size_t layer = 0, std::int64_t used = 0) {
  if (layer == slots.size()) return used <= available ? 0.0 : INFINITY;
  double best = INFINITY;
  for (std::size_t o = 0; o < slots[layer].size(); ++o)
    best = std::min(best, loss[layer][o] + brute_force(slots, loss, available, layer + 1, used + slots[layer][o]));
  return best;
}

}  // namespace

// A family planned once for the cases; outside the anonymous namespace because the test class holds
// one (GCC's -Wsubobject-linkage, in the unity build that includes this file).
struct Planned {
  Family family;
  std::unique_ptr<HostStore> store;
  std::vector<std::string> sha256;
  std::vector<std::int64_t> calibration;
};

class TestVirtualPlan : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  Planned bible_;

  VirtualPlanOptions options(std::uint64_t budget) const {
    VirtualPlanOptions o;
    o.budget_bytes = budget;
    o.reserve = {.context_tokens = 256, .requests = 1, .prefill_chunk = 128};
    o.updates.staging = 1;
    o.window = 64;
    o.max_windows = 8;
    return o;
  }
  // Non-expert weights, reserve and staging: what the budget holds before any expert.
  std::uint64_t fixed_bytes() const {
    ReserveSpec reserve = options(0).reserve;
    reserve.miss_slots = 0;
    const RuntimeConfig c{.miss = "masked", .reserve = reserve, .virtual_experts = VirtualConfig{.staging = 1}};
    return plan_device(*bible_.store, c, *make_miss_policy("masked")).budget.used();
  }
  Layout plan(std::uint64_t budget) {
    return plan_virtual(bible_.family, bible_.sha256, *bible_.store, bible_.calibration, options(budget));
  }
  // The runtime serving `layout` under its budget: what it charges.
  std::uint64_t served_bytes(const Layout& layout) {
    RuntimeConfig c{.budget_bytes = layout.budget_bytes, .reserve = options(0).reserve};
    apply_virtual_layout(c, layout, {0}, *bible_.store);
    return Runtime(*bible_.store, c).budget().used();
  }

 private Q_SLOTS:
  void initTestCase() {
    open_family(bible_.family, {sample_family() / "bible"});
    bible_.store = std::make_unique<HostStore>(bible_.family);
    bible_.sha256 = family_sha256(bible_.family, std::nullopt);
    // Calibration: the first half of the held-out text (the second half stays unseen).
    const std::string text = read_text_file(sample_family() / "heldout" / "bible.txt");
    bible_.calibration = Tokenizer::load(sample_family() / "bible" / "tokenizer.json").encode(text.substr(0, text.size() / 2), false);
  }

  void theDynamicProgramIsExact() {
    std::mt19937_64 rng(5);
    for (int trial = 0; trial < 200; ++trial) {
      const std::size_t layers = 1 + rng() % 4, options = 1 + rng() % 5;
      std::vector<std::vector<std::int64_t>> slots(layers);
      std::vector<std::vector<double>> loss(layers);
      for (std::size_t l = 0; l < layers; ++l) {
        std::int64_t s = 1 + static_cast<std::int64_t>(rng() % 3);
        double x = 5.0 * static_cast<double>(rng() % 1000) / 1000.0;
        for (std::size_t o = 0; o < options; ++o) {
          slots[l].push_back(s);
          loss[l].push_back(x);
          s += 1 + static_cast<std::int64_t>(rng() % 3);
          x *= static_cast<double>(rng() % 1000) / 1000.0;  // more slots, less loss (not strictly)
        }
      }
      std::int64_t least = 0;
      for (const auto& s : slots) least += s.front();
      const std::int64_t available = least + static_cast<std::int64_t>(rng() % 12);
      const std::vector<std::size_t> choice = plan_counts(slots, loss, available);
      double got = 0;
      std::int64_t used = 0;
      for (std::size_t l = 0; l < layers; ++l) {
        got += loss[l][choice[l]];
        used += slots[l][choice[l]];
      }
      QVERIFY(used <= available);
      QVERIFY2(std::abs(got - brute_force(slots, loss, available)) < 1e-12, ("trial " + std::to_string(trial)).c_str());
    }
    expect_mentions(error_of<BudgetError>([] { plan_counts({{2, 3}, {2, 4}}, {{1, 0}, {1, 0}}, 3); }), {"3 expert slots", "the 4"});
  }

  void thePlanFitsItsBudgetToTheByte() {
    MOSAIC_RELEASE_BUILD_ONLY("one plan is made in theLayoutRoundTrips; this one makes five");
    const ModelSpec& s = bible_.store->spec();
    const std::uint64_t slot = bible_.store->expert_bytes(), fixed = fixed_bytes();
    const std::uint64_t least = fixed + static_cast<std::uint64_t>(s.top_k * s.num_sparse_layers()) * slot;
    // Below the least budget: refused before measuring, naming the minimum to the byte.
    expect_mentions(error_of<BudgetError>([&] { plan(least - 1); }), {"below virtual experts' minimum", std::to_string(least) + " bytes"});
    for (const std::uint64_t budget : {least, least + slot - 1, least + 3 * slot + 17, least + 9 * slot, least + 100 * slot}) {
      const Layout layout = plan(budget);
      const VirtualLayout& v = *layout.virtual_experts;
      std::int64_t experts = 0;
      for (std::int64_t c : v.counts) experts += c;
      const std::uint64_t used = served_bytes(layout);
      QCOMPARE(used, fixed + static_cast<std::uint64_t>(experts) * slot);  // the planner's bytes are the runtime's
      QVERIFY(used <= budget);
      // Room for another expert is left only where no layer's calibration loss would fall with one more.
      if (budget - used >= slot)
        for (std::int64_t l = 0; l < s.num_layers; ++l) {
          const std::int64_t c = v.counts[static_cast<std::size_t>(l)];
          const auto& curve = v.planner.loss[static_cast<std::size_t>(l)];
          if (c < s.num_experts)
            QVERIFY2(curve[static_cast<std::size_t>(c + 1 - v.planner.first_count)] >= curve[static_cast<std::size_t>(c - v.planner.first_count)],
                     ("layer " + std::to_string(l) + " had room for one more expert").c_str());
        }
      QCOMPARE(layout.plan.capacity, experts);
      for (std::int64_t l = 0; l < s.num_layers; ++l) QVERIFY(v.counts[static_cast<std::size_t>(l)] >= s.top_k);
      // Room for every expert: all are resident, whatever masking some scored on the calibration text.
      if (budget >= fixed + static_cast<std::uint64_t>(s.num_experts * s.num_sparse_layers()) * slot)
        for (std::int64_t l = 0; l < s.num_layers; ++l)
          if (s.is_sparse(l)) QCOMPARE(v.counts[static_cast<std::size_t>(l)], s.num_experts);
    }
  }

  void thePlanBeatsUniformCounts() {
    MOSAIC_RELEASE_BUILD_ONLY("one plan is made in theLayoutRoundTrips; this one makes four and compares their quality");
    const ModelSpec& s = bible_.store->spec();
    const std::uint64_t slot = bible_.store->expert_bytes();
    bool strictly = false;
    for (std::int64_t extra : {2, 4, 8, 12}) {
      const Layout layout = plan(fixed_bytes() + static_cast<std::uint64_t>(s.top_k * s.num_sparse_layers() + extra) * slot);
      const VirtualLayout::Planner& p = layout.virtual_experts->planner;
      qInfo("%lld more experts than top-k everywhere: objective %.4f planned, %.4f uniform (%lld per layer); measured NLL %.4f vs %.4f (all "
            "resident %.4f)",
            static_cast<long long>(extra), p.objective, p.uniform_objective, static_cast<long long>(p.uniform_count), p.planned_nll,
            p.uniform_nll, p.full_nll);
      QVERIFY(p.objective <= p.uniform_objective + 1e-12);
      strictly |= p.objective < p.uniform_objective - 1e-3 && p.planned_nll < p.uniform_nll;
      QVERIFY(p.planned_nll >= p.full_nll - 0.05);  // masking costs, give or take noise
    }
    QVERIFY(strictly);
  }

  void theLayoutRoundTrips() {
    const ModelSpec& s = bible_.store->spec();
    const Layout layout = plan(fixed_bytes() + static_cast<std::uint64_t>(s.top_k * s.num_sparse_layers() + 5) * bible_.store->expert_bytes());
    const fs::path file = fs::path(tmp_.path().toStdString()) / "virtual.json";
    save_layout(layout, file);
    const Layout back = load_layout(file);
    QCOMPARE(back.plan.policy, Policy::Virtual);
    QVERIFY(back.virtual_experts.has_value());
    QCOMPARE(back.virtual_experts->counts, layout.virtual_experts->counts);
    QCOMPARE(back.virtual_experts->initial, layout.virtual_experts->initial);
    QCOMPARE(back.virtual_experts->staging, std::int64_t(1));
    QCOMPARE(back.virtual_experts->planner.loss, layout.virtual_experts->planner.loss);
    QCOMPARE(back.plan.map, layout.plan.map);
    QCOMPARE(served_bytes(back), served_bytes(layout));
    match_layout(back, bible_.family, bible_.sha256, file.string());
    // Counts the model cannot serve are refused when the layout is applied, naming the field.
    Layout few = back;
    few.virtual_experts->counts[1] = 1;
    RuntimeConfig c;
    expect_mentions(error_of<MismatchError>([&] { apply_virtual_layout(c, few, {0}, *bible_.store); }), {"virtual.counts[1]", "fewer than the 2"});
  }

  void badVirtualSectionsAreNamed() {
    using json = nlohmann::json;
    const ModelSpec& s = bible_.store->spec();
    const fs::path good = fs::path(tmp_.path().toStdString()) / "good.json", bad = fs::path(tmp_.path().toStdString()) / "bad.json";
    save_layout(plan(fixed_bytes() + static_cast<std::uint64_t>(s.top_k * s.num_sparse_layers() + 5) * bible_.store->expert_bytes()), good);
    const json original = json::parse(read_text_file(good));
    const std::vector<std::tuple<std::string, std::function<void(json&)>, std::string>> cases{
        {"counts short", [](json& v) { v["virtual"]["counts"].erase(v["virtual"]["counts"].size() - 1); }, "virtual.counts"},
        {"count too big", [](json& v) { v["virtual"]["counts"][0] = 9; }, "virtual.counts"},
        {"expert twice", [](json& v) { v["virtual"]["initial"][0][1] = v["virtual"]["initial"][0][0]; }, "virtual.initial[0]"},
        {"too few", [](json& v) { v["virtual"]["initial"][1].erase(v["virtual"]["initial"][1].size() - 1); }, "virtual.initial[1]"},
        {"variant out of range", [](json& v) { v["virtual"]["initial"][0][0][0] = 3; }, "virtual.initial[0]"},
        {"map disagrees", [](json& v) { v["map"][0] = json(std::vector<int>(8, -1)); }, "map"},
        {"decay", [](json& v) { v["virtual"]["decay"] = 0; }, "virtual.decay"},
        {"update interval", [](json& v) { v["virtual"]["update_every"] = 0; }, "virtual.update_every"},
        {"missing", [](json& v) { v.erase("virtual"); }, "virtual"},
        {"on another policy", [](json& v) { v["policy"] = "round-robin"; }, "virtual"},
    };
    for (const auto& [name, edit, field] : cases) {
      json v = original;
      edit(v);
      std::ofstream(bad) << v.dump();
      const std::string message = error_of<FormatError>([&] { load_layout(bad); });
      QVERIFY2(message.find(bad.string()) != std::string::npos && message.find("'" + field + "'") != std::string::npos, (name + ": " + message).c_str());
    }
  }
};

QTEST_GUILESS_MAIN(TestVirtualPlan)
#include "tst_virtual_plan.moc"
