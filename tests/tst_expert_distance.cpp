// Expert distances: hand-made families with exact answers, the ESFT fixtures (untouched experts are
// exactly zero apart), an independent double-precision recomputation, progress / cancel, and the
// cross-position matrix of a pair.
#include <QTemporaryDir>
#include <QTest>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "analysis/cross_distance.h"
#include "analysis/expert_distance.h"
#include "common/error.h"
#include "model/synthetic.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

namespace {
// Adds `delta` to every element of the F32 tensor `name` in dir's checkpoint.
void shift(const fs::path& dir, const std::string& name, float delta) {
  rewrite_weights(dir, [](const TensorInfo&) { return true; }, [&](const TensorInfo& t, std::vector<std::byte>& b) {
    if (t.name != name) return;
    auto* f = reinterpret_cast<float*>(b.data());
    for (std::int64_t i = 0; i < t.numel(); ++i) f[i] += delta;
  });
}
bool near(double a, double b, double rel = 1e-6) { return std::abs(a - b) <= rel * std::max(1.0, std::abs(b)); }

// ‖A(l, e) − B(l2, e2)‖ in double, straight from two qwen2_moe fixture files.
double reference_distance(const SafetensorsFile& a, std::int64_t l, std::int64_t e, const SafetensorsFile& b,
                          std::int64_t l2, std::int64_t e2) {
  double sq = 0;
  for (const char* role : {"gate_proj", "up_proj", "down_proj"}) {
    auto name = [&](std::int64_t layer, std::int64_t expert) {
      return "model.layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(expert) + "." + role + ".weight";
    };
    const auto x = read_f32(a, name(l, e)), y = read_f32(b, name(l2, e2));
    for (std::size_t k = 0; k < x.size(); ++k) sq += (double(x[k]) - y[k]) * (double(x[k]) - y[k]);
  }
  return std::sqrt(sq);
}
}  // namespace

class TestExpertDistance : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  fs::path scratch(const std::string& name) const { return fs::path(tmp_.path().toStdString()) / name; }

 private Q_SLOTS:
  void initTestCase() { QVERIFY(tmp_.isValid()); }

  void handMadeFamilyHasExactAnswers() {
    // hidden 64, expert width 32: gate and up hold 2048 elements each.
    const fs::path a = scratch("a");
    write_synthetic_checkpoint(a, mixtral_like_spec(64, 64, 32, 2, 4), DType::F32, 5);
    const fs::path b = copy_checkpoint(a, scratch("b")), c = copy_checkpoint(a, scratch("c"));
    shift(b, "model.layers.1.block_sparse_moe.experts.2.w1.weight", 0.5f);   // gate
    shift(c, "model.layers.1.block_sparse_moe.experts.2.w3.weight", -0.25f); // up
    shift(c, "model.layers.0.block_sparse_moe.experts.0.w2.weight", 1.0f);   // down
    Family f;
    f.add("a", a);
    f.add("b", b);
    f.add("c", c);
    const auto d = expert_distances(f);
    QVERIFY(d);
    const double n = std::sqrt(2048.0);
    QVERIFY(near(d->pair(0, 1, 1, 2), 0.5 * n));
    QVERIFY(near(d->pair(0, 2, 1, 2), 0.25 * n));
    QVERIFY(near(d->pair(1, 2, 1, 2), std::sqrt(0.25 + 0.0625) * n));  // gate and up both differ
    QVERIFY(near(d->pair(2, 0, 0, 0), n));                            // pair order does not matter
    QVERIFY(near(d->at(1, 2), (0.5 + 0.25 + std::sqrt(0.3125)) * n));
    QVERIFY(near(d->at(0, 0), 2 * n));
    for (std::int64_t l = 0; l < 2; ++l)
      for (std::int64_t e = 0; e < 4; ++e)
        if (!(l == 1 && e == 2) && !(l == 0 && e == 0)) QCOMPARE(d->at(l, e), 0.0);
  }

  void esftVariantsDifferOnlyWhereTuned_data() {
    QTest::addColumn<QString>("family");
    for (const auto& f : families()) QTest::newRow(f.c_str()) << QString::fromStdString(f);
  }
  void esftVariantsDifferOnlyWhereTuned() {
    QFETCH(QString, family);
    Family f;
    for (const char* v : {"base", "esft1", "esft2"}) f.add(v, fixture(family.toStdString(), v));
    const auto d = expert_distances(f, {}, 2);
    QVERIFY(d);
    const auto manifest = nlohmann::json::parse(std::ifstream(data_dir() / "hf-tiny" / "manifest.json"))[family.toStdString()];
    for (int v : {1, 2}) {
      const auto& tuned = manifest["esft" + std::to_string(v) + "_experts"];
      for (std::int64_t l = 0; l < d->layers; ++l)
        for (std::int64_t e = 0; e < d->experts; ++e) {
          const auto& ids = tuned[std::to_string(l)];
          const bool changed = std::find(ids.begin(), ids.end(), e) != ids.end();
          const double dist = d->pair(0, v, l, e);
          QVERIFY2(changed ? dist > 0 : dist == 0.0, qPrintable(QStringLiteral("esft%1 layer %2 expert %3: %4").arg(v).arg(l).arg(e).arg(dist)));
        }
    }
  }

  // Every position of a fine-tuned family against a plain double-precision computation.
  void matchesIndependentComputation() {
    Family f;
    for (const char* v : {"base", "ft1", "ft3"}) f.add(v, fixture("qwen2_moe", v));
    const auto d = expert_distances(f);
    QVERIFY(d);
    std::vector<SafetensorsFile> files;
    for (const char* v : {"base", "ft1", "ft3"}) files.emplace_back(fixture("qwen2_moe", v) / "model.safetensors");
    for (std::int64_t l = 0; l < d->layers; ++l)
      for (std::int64_t e = 0; e < d->experts; ++e) {
        double total = 0;
        for (int i = 0; i < 3; ++i)
          for (int j = i + 1; j < 3; ++j) {
            double sq = 0;
            for (const char* role : {"gate_proj", "up_proj", "down_proj"}) {
              const std::string name = "model.layers." + std::to_string(l) + ".mlp.experts." + std::to_string(e) + "." + role + ".weight";
              const auto x = read_f32(files[i], name), y = read_f32(files[j], name);
              for (std::size_t k = 0; k < x.size(); ++k) sq += (double(x[k]) - y[k]) * (double(x[k]) - y[k]);
            }
            QVERIFY(near(d->pair(i, j, l, e), std::sqrt(sq), 1e-5));
            total += std::sqrt(sq);
          }
        QVERIFY(near(d->at(l, e), total, 1e-5));
      }
    // The fine-tunes drift more in deeper layers (0.05·(1 + layer)): the mean distance grows.
    auto mean = [&](std::int64_t l) { double m = 0; for (std::int64_t e = 0; e < d->experts; ++e) m += d->at(l, e); return m; };
    QVERIFY(mean(0) < mean(1) && mean(1) < mean(2));
  }

  void progressAndCancel() {
    Family f;
    f.add("base", fixture("olmoe", "base"));
    f.add("ft1", fixture("olmoe", "ft1"));
    std::vector<std::int64_t> seen;
    QVERIFY(expert_distances(f, [&](std::int64_t done, std::int64_t total) { seen.push_back(done); return total == 24; }, 2));
    QCOMPARE(seen.size(), std::size_t(24));  // 3 layers × 8 experts
    QCOMPARE(seen.back(), std::int64_t(24));
    int calls = 0;
    QVERIFY(!expert_distances(f, [&](std::int64_t, std::int64_t) { return ++calls < 3; }, 1));
    QCOMPARE(calls, 3);  // stopped at the first refusal
    Family one;
    one.add("base", fixture("olmoe", "base"));
    // One variant: no pairs, so every MoE position is at distance 0 and dense ones stay undefined.
    const auto alone = expert_distances(one);
    QVERIFY(alone.ok());
    QCOMPARE(alone->pair_count(), std::int64_t(0));
    for (std::int64_t l = 0; l < alone->layers; ++l)
      for (std::int64_t e = 0; e < alone->experts; ++e) QCOMPARE(alone->at(l, e), 0.0);
    expect_mentions(error_of<InvalidArgument>([&] { expert_distances(Family{}).rethrow(); }), {"no variant"});
  }

  // Figure 2 of the paper on the fixtures: a fine-tune stays close to its base at the same position
  // and far from every other position's expert.
  void crossPositionMatrix() {
    const Checkpoint base(fixture("qwen2_moe", "base")), ft1(fixture("qwen2_moe", "ft1"));
    const auto cross = cross_position_distances(base, ft1, std::nullopt, {}, 2);
    QVERIFY(cross);
    QCOMPARE(cross->size(), std::size_t(3 * 8));
    const SafetensorsFile a(fixture("qwen2_moe", "base") / "model.safetensors"), b(fixture("qwen2_moe", "ft1") / "model.safetensors");
    for (std::size_t r : {0u, 5u, 13u, 23u})
      for (std::size_t c : {0u, 7u, 13u, 22u}) {
        const auto [l, e] = cross->positions[r];
        const auto [l2, e2] = cross->positions[c];
        QVERIFY(near(cross->at(r, c), reference_distance(a, l, e, b, l2, e2), 1e-5));
      }
    // The diagonal is the pair distance of Algorithm 1.
    Family f;
    f.add("base", fixture("qwen2_moe", "base"));
    f.add("ft1", fixture("qwen2_moe", "ft1"));
    const auto d = expert_distances(f);
    double worst_ratio = 0;
    for (std::size_t r = 0; r < cross->size(); ++r) {
      const auto [l, e] = cross->positions[r];
      QVERIFY(near(cross->at(r, r), d->pair(0, 1, l, e), 1e-6));
      for (std::size_t c = 0; c < cross->size(); ++c)
        if (c != r) worst_ratio = std::max(worst_ratio, cross->at(r, r) / cross->at(r, c));
    }
    QVERIFY2(worst_ratio < 0.5, qPrintable(QString::number(worst_ratio)));  // every same-position distance is smallest

    // One layer: the matching block of the full matrix.
    const auto one = cross_position_distances(base, ft1, 1, {}, 1);
    QVERIFY(one);
    QCOMPARE(one->size(), std::size_t(8));
    for (std::size_t r = 0; r < 8; ++r)
      for (std::size_t c = 0; c < 8; ++c) QCOMPARE(one->at(r, c), cross->at(8 + r, 8 + c));

    // A checkpoint against itself: symmetric with a zero diagonal.
    const auto self = cross_position_distances(base, base, 2, {}, 2);
    for (std::size_t r = 0; r < 8; ++r) {
      QCOMPARE(self->at(r, r), 0.0);
      for (std::size_t c = 0; c < 8; ++c) QCOMPARE(self->at(r, c), self->at(c, r));
    }
  }

  void crossPositionErrorsAndCancel() {
    const Checkpoint base(fixture("qwen2_moe", "base")), ft1(fixture("qwen2_moe", "ft1"));
    expect_mentions(error_of<InvalidArgument>([&] { cross_position_distances(base, ft1, 3).rethrow(); }), {"layer 3", "not an MoE layer"});
    const Checkpoint other(fixture("olmoe", "base"));
    expect_mentions(error_of<InvalidArgument>([&] { cross_position_distances(base, other).rethrow(); }), {"is not a variant of"});
    int calls = 0;
    QVERIFY(!cross_position_distances(base, ft1, std::nullopt, [&](std::int64_t, std::int64_t) { return ++calls < 2; }, 1));
    QCOMPARE(calls, 2);
  }
};

QTEST_GUILESS_MAIN(TestExpertDistance)
#include "tst_expert_distance.moc"
