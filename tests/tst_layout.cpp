// Layout files: a round trip keeps every field, every malformed file is refused with a typed error
// naming the field, and a layout applied to the wrong variants or to changed checkpoints is refused.
#include <QTemporaryDir>
#include <QTest>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "analysis/family_analysis.h"
#include "analysis/layout.h"
#include "common/error.h"
#include "model/synthetic.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;
using json = nlohmann::json;

class TestLayout : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  fs::path scratch(const std::string& name) const { return fs::path(tmp_.path().toStdString()) / name; }

  // A layout planned from the olmoe fixtures base, ft1 and ft2.
  static Layout planned(const Family& f, Policy policy = Policy::RoundRobin) {
    const auto a = analyze_family(f);
    const double shares[] = {2, 1, 1};
    Layout layout = make_layout(f, a->sha256, plan_consolidation(a->distances, 10, policy, shares));
    layout.budget_bytes = 123456789;
    layout.reserve = {{"kv cache", 1000, "2 × …"}, {"miss slots", 2000, "2 experts"}};
    layout.reserve_spec = ReserveSpec{.context_tokens = 64, .requests = 3, .prefill_chunk = 16, .miss_slots = 0, .kv_bytes = 4};
    return layout;
  }
  static void open(Family& f) {
    for (const char* v : {"base", "ft1", "ft2"}) f.add(v, fixture("olmoe", v));
  }
  json saved(const Layout& layout, const std::string& name) const {
    save_layout(layout, scratch(name));
    return json::parse(std::ifstream(scratch(name)));
  }
  // Writes `j` and returns the message of the error loading it throws.
  template <class E>
  std::string load_error(const json& j, const std::string& name) const {
    std::ofstream(scratch(name)) << j.dump();
    return error_of<E>([&] { load_layout(scratch(name)); });
  }

 private Q_SLOTS:
  void initTestCase() { QVERIFY(tmp_.isValid()); }

  void roundTripKeepsEveryField() {
    Family f;
    open(f);
    for (Policy policy : {Policy::RoundRobin, Policy::Medoid, Policy::Weighted}) {
      const Layout a = planned(f, policy);
      save_layout(a, scratch("layout.json"));
      const Layout b = load_layout(scratch("layout.json"));
      QCOMPARE(b.variants.size(), a.variants.size());
      for (std::size_t i = 0; i < a.variants.size(); ++i) {
        QCOMPARE(b.variants[i].name, a.variants[i].name);
        QCOMPARE(b.variants[i].path, a.variants[i].path);
        QCOMPARE(b.variants[i].sha256, a.variants[i].sha256);
      }
      QCOMPARE(b.budget_bytes, a.budget_bytes);
      QCOMPARE(b.reserve.size(), std::size_t(2));
      QCOMPARE(b.reserve[1].bytes, std::uint64_t(2000));
      QVERIFY(b.reserve_spec);
      QCOMPARE(b.reserve_spec->context_tokens, std::int64_t(64));
      QCOMPARE(b.reserve_spec->requests, std::int64_t(3));
      QCOMPARE(b.reserve_spec->prefill_chunk, std::int64_t(16));
      QCOMPARE(b.reserve_spec->miss_slots, std::int64_t(0));
      QCOMPARE(b.reserve_spec->kv_bytes, std::int64_t(4));
      QCOMPARE(b.plan.policy, policy);
      QCOMPARE(b.plan.capacity, std::int64_t(10));
      QCOMPARE(b.plan.shares, a.plan.shares);
      QCOMPARE(b.plan.layers, std::int64_t(3));
      QCOMPARE(b.plan.experts, std::int64_t(8));
      QCOMPARE(b.plan.map, a.plan.map);
      QCOMPARE(b.plan.rank, a.plan.rank);
      QCOMPARE(b.plan.distance, a.plan.distance);
      QCOMPARE(b.plan.resident_counts(), a.plan.resident_counts());
    }
    // A layout made from a capacity has no budget, and it says so with null.
    Layout c = planned(f);
    c.budget_bytes.reset();
    QVERIFY(saved(c, "capacity.json")["budget_bytes"].is_null());
    QVERIFY(!load_layout(scratch("capacity.json")).budget_bytes);
    // A file from before the reserve's settings were recorded reads without them.
    json old = saved(planned(f), "old.json");
    old.erase("reserve_spec");
    std::ofstream(scratch("old.json")) << old.dump();
    QVERIFY(!load_layout(scratch("old.json")).reserve_spec);
  }

  void denseLayersRoundTripAsNull() {
    // Qwen3-MoE with a dense layer 1: its distances are NaN in memory, null in the file.
    const ModelSpec spec = parse_model_spec(qwen3_moe_config(), "qwen3");
    Family f;
    for (int v = 0; v < 2; ++v) {
      write_synthetic_checkpoint(scratch("q3-" + std::to_string(v)), spec, DType::F32, 3 + static_cast<std::uint64_t>(v));
      f.add("v" + std::to_string(v), scratch("q3-" + std::to_string(v)));
    }
    const auto a = analyze_family(f);
    const Layout layout = make_layout(f, a->sha256, plan_consolidation(a->distances, 1000, Policy::RoundRobin));
    const json j = saved(layout, "dense.json");
    QVERIFY(j["distance"][1][0].is_null());
    QCOMPARE(j["rank"][1][0].get<int>(), -1);
    const Layout back = load_layout(scratch("dense.json"));
    QVERIFY(std::isnan(back.plan.distance[static_cast<std::size_t>(back.plan.experts)]));
    QCOMPARE(match_layout(back, f, a->sha256, "dense.json"), (std::vector<int>{0, 1}));

    // A resident copy in the dense layer is refused when applied.
    Layout bad = back;
    bad.plan.map[static_cast<std::size_t>(bad.plan.experts)] = 0;
    expect_mentions(error_of<MismatchError>([&] { match_layout(bad, f, a->sha256, "dense.json"); }),
                    {"dense.json", "map[1][0]", "dense layer 1"});
  }

  void malformedFilesAreRefused() {
    Family f;
    open(f);
    const json good = saved(planned(f), "good.json");
    struct Case { const char* name; std::function<void(json&)> edit; std::vector<std::string> mentions; };
    const std::vector<Case> cases = {
        {"missing schema", [](json& j) { j.erase("schema"); }, {"'schema'", "missing"}},
        {"missing map", [](json& j) { j.erase("map"); }, {"'map'", "missing"}},
        {"too few layers in rank", [](json& j) { j["rank"].erase(2); }, {"'rank'", "has 2 layers where 'map' has 3"}},
        {"short row", [](json& j) { j["map"][1].erase(7); }, {"'map[1]'", "array of 8 experts"}},
        {"long row in distance", [](json& j) { j["distance"][0].push_back(1.0); }, {"'distance[0]'", "8 experts"}},
        {"variant out of range", [](json& j) { j["map"][2][3] = 3; }, {"'map[2][3]'", "below 3"}},
        {"not a number", [](json& j) { j["map"][0][0] = "base"; }, {"'map[0][0]'"}},
        {"negative distance", [](json& j) { j["distance"][0][1] = -1.0; }, {"'distance[0][1]'", "≥ 0"}},
        {"too many residents", [](json& j) { j["capacity"] = 3; }, {"'map'", "10 experts resident", "capacity of 3"}},
        {"repeated rank", [](json& j) { j["rank"][0][0] = j["rank"][0][1]; }, {"'rank'", "twice"}},
        {"unknown policy", [](json& j) { j["policy"] = "lottery"; }, {"'policy'", "lottery"}},
        {"no variants", [](json& j) { j["variants"] = json::array(); }, {"'variants'", "empty"}},
        {"variant without hash", [](json& j) { j["variants"][1].erase("sha256"); }, {"'sha256'", "missing"}},
        {"same variant twice", [](json& j) { j["variants"][1]["name"] = "base"; }, {"'variants'", "'base' twice"}},
        {"budget as text", [](json& j) { j["budget_bytes"] = "12GiB"; }, {"'budget_bytes'", "byte count or null"}},
        {"weighted without shares", [](json& j) { j["policy"] = "weighted", j["shares"] = json::array(); }, {"'shares'", "one share per variant"}},
        // 2^64 − 1 reads back as −1 through int64: it must not pass for an empty cell.
        {"map cell 2^64-1", [](json& j) { j["map"][0][0] = std::numeric_limits<std::uint64_t>::max(); }, {"'map[0][0]'", "-1 or a variant index"}},
        {"rank 2^64-1", [](json& j) { j["rank"][0][0] = std::numeric_limits<std::uint64_t>::max(); }, {"'rank[0][0]'", "-1 or a rank"}},
        {"reserve detail of another type", [](json& j) { j["reserve"] = {{{"name", "kv"}, {"bytes", 1}, {"detail", 5}}}; }, {"wrong type"}},
        {"capacity 2^64-1", [](json& j) { j["capacity"] = std::numeric_limits<std::uint64_t>::max(); }, {"'capacity'", "integer from 0"}},
        {"reserve spec not an object", [](json& j) { j["reserve_spec"] = 4096; }, {"'reserve_spec'", "an object"}},
        {"reserve spec without context", [](json& j) { j["reserve_spec"].erase("context_tokens"); }, {"'reserve_spec.context_tokens'", "missing"}},
        {"reserve spec of no requests", [](json& j) { j["reserve_spec"]["requests"] = 0; }, {"'reserve_spec.requests'", "from 1"}},
        {"reserve spec miss slots 2^64-1", [](json& j) { j["reserve_spec"]["miss_slots"] = std::numeric_limits<std::uint64_t>::max(); },
         {"'reserve_spec.miss_slots'", "from -1"}},
    };
    for (const Case& c : cases) {
      json j = good;
      c.edit(j);
      const std::string msg = load_error<FormatError>(j, "bad.json");
      QVERIFY2(msg.find("bad.json") != std::string::npos, (std::string(c.name) + ": " + msg).c_str());
      for (const auto& m : c.mentions) QVERIFY2(msg.find(m) != std::string::npos, (std::string(c.name) + ": " + msg).c_str());
    }
    json v2 = good;
    v2["schema"] = "mosaic.layout/2";
    expect_mentions(load_error<UnsupportedError>(v2, "v2.json"), {"v2.json", "mosaic.layout/2", "mosaic.layout/1"});
    std::ofstream(scratch("text.json")) << "{\"schema\": ";
    expect_mentions(error_of<FormatError>([&] { load_layout(scratch("text.json")); }), {"text.json", "not valid JSON"});
    expect_mentions(error_of<IoError>([&] { load_layout(scratch("absent.json")); }), {"absent.json", "does not exist"});
  }

  void wrongVariantsAndChangedCheckpointsAreRefused() {
    Family f;
    open(f);
    const Layout layout = planned(f);
    const auto hashes = family_sha256(f, std::nullopt);
    QCOMPARE(match_layout(layout, f, hashes, "l.json"), (std::vector<int>{0, 1, 2}));

    // Order of the variants given does not matter: indices follow the names.
    Family reordered;
    for (const char* v : {"ft2", "base", "ft1"}) reordered.add(v, fixture("olmoe", v));
    QCOMPARE(match_layout(layout, reordered, family_sha256(reordered, std::nullopt), "l.json"), (std::vector<int>{1, 2, 0}));

    Layout renamed = layout;
    renamed.variants[1].name = "ft9";
    expect_mentions(error_of<MismatchError>([&] { match_layout(renamed, f, hashes, "l.json"); }),
                    {"l.json", "variant 'ft9'", "not among the variants given"});

    Family more;
    open(more);
    more.add("ft3", fixture("olmoe", "ft3"));
    expect_mentions(error_of<MismatchError>([&] { match_layout(layout, more, family_sha256(more, std::nullopt), "l.json"); }),
                    {"variant 'ft3'", "not in the layout"});

    // ft1 changed on disk after planning: same name, another hash.
    Family changed;
    changed.add("base", fixture("olmoe", "base"));
    const fs::path ft1 = copy_checkpoint(fixture("olmoe", "ft1"), scratch("ft1"));
    rewrite_weights(ft1, [](const TensorInfo&) { return true; }, [](const TensorInfo& t, std::vector<std::byte>& b) {
      if (t.name == "model.layers.0.mlp.experts.0.up_proj.weight") b[5] ^= std::byte{1};
    });
    changed.add("ft1", ft1);
    changed.add("ft2", fixture("olmoe", "ft2"));
    expect_mentions(error_of<MismatchError>([&] { match_layout(layout, changed, family_sha256(changed, std::nullopt), "l.json"); }),
                    {"variant 'ft1'", "has changed since the layout was made", "re-run consolidate"});

    // A layout of a model with another shape.
    Layout other = layout;
    other.plan.experts = 4;
    expect_mentions(error_of<MismatchError>([&] { match_layout(other, f, hashes, "l.json"); }), {"3 layers × 4 experts", "3 × 8"});
  }
};

QTEST_GUILESS_MAIN(TestLayout)
#include "tst_layout.moc"
