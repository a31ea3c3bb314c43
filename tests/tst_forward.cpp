// The CPU reference forward pass against transformers: logits and greedy continuations of every
// variant of every fixture family, the KV cache against the full pass, and what no fixture has,
// through properties only that design has: Qwen3-MoE's per-head q/k norms, OLMoE's clip_qkv.
#include <QTemporaryDir>
#include <QTest>

#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/checkpoint.h"
#include "model/synthetic.h"
#include "runtime/forward.h"
#include "runtime/generation.h"
#include "runtime/threads.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

namespace {

std::unique_ptr<Model> load(const fs::path& dir) { return Model::load(Checkpoint(dir)); }

std::vector<float> all_logits(const Model& m, const std::vector<std::int64_t>& ids, std::int64_t batch) {
  KvCache cache(m.spec(), batch, static_cast<std::int64_t>(ids.size()) / batch);
  return forward(m, cache, ids, LogitsFor::AllPositions).values;
}

// Multiplies the first `rows` rows of every layer's tensor named by `part` (a suffix) by `factor`.
void scale_rows(const fs::path& dir, const std::string& part, std::int64_t rows, float factor) {
  rewrite_weights(dir, [](const TensorInfo&) { return true; }, [&](const TensorInfo& t, std::vector<std::byte>& b) {
    if (t.name.size() < part.size() || t.name.compare(t.name.size() - part.size(), part.size(), part) != 0) return;
    QVERIFY(t.dtype == DType::F32);
    auto* f = reinterpret_cast<float*>(b.data());
    for (std::int64_t i = 0; i < rows * t.shape[1]; ++i) f[i] *= factor;
  });
}

}  // namespace

class TestForward : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  fs::path scratch(const std::string& name) const { return fs::path(tmp_.path().toStdString()) / name; }

  void add_family_variant_rows() {
    QTest::addColumn<QString>("family");
    QTest::addColumn<QString>("variant");
    for (const auto& f : families())
      for (const auto& v : variants())
        QTest::newRow((f + "/" + v).c_str()) << QString::fromStdString(f) << QString::fromStdString(v);
  }

  fs::path qwen3_checkpoint(const std::string& name) {
    ModelSpec s = parse_model_spec(qwen3_moe_config(), "qwen3");
    s.rms_norm_eps = 1e-12;  // makes RMSNorm exactly scale-invariant for the property tests
    const fs::path dir = scratch(name);
    write_synthetic_checkpoint(dir, s, DType::F32, 11);
    return dir;
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    configure_threads();
  }

  void logitsMatchTransformers_data() { add_family_variant_rows(); }
  void logitsMatchTransformers() {
    QFETCH(QString, family);
    QFETCH(QString, variant);
    const SafetensorsFile ref(fixture(family.toStdString()) / "reference.safetensors");
    const auto ids = read_i64(ref, "input_ids");  // [2, 24]: a batch of two sequences
    const auto want = read_f32(ref, "logits." + variant.toStdString());
    const auto model = load(fixture(family.toStdString(), variant.toStdString()));
    const double err = relative_error(all_logits(*model, ids, 2), want);
    qInfo("relative error %.3g", err);
    QVERIFY2(err <= 1e-4, qPrintable(QStringLiteral("relative error %1").arg(err)));
  }

  void greedyMatchesTransformers_data() { add_family_variant_rows(); }
  void greedyMatchesTransformers() {
    QFETCH(QString, family);
    QFETCH(QString, variant);
    const SafetensorsFile ref(fixture(family.toStdString()) / "reference.safetensors");
    const auto greedy = read_i64(ref, "greedy." + variant.toStdString());  // 12 prompt ids + 10 generated
    const auto model = load(fixture(family.toStdString(), variant.toStdString()));
    GenerationRequest req;
    req.prompt.assign(greedy.begin(), greedy.begin() + 12);
    req.max_new_tokens = 10;
    const GenerationResult r = generate(*model, req);
    QCOMPARE(r.finish, Finish::Length);
    QCOMPARE(r.tokens, std::vector<std::int64_t>(greedy.begin() + 12, greedy.end()));
  }

  // Decoding token by token through the cache gives the logits of one pass over the whole sequence.
  void cacheMatchesFullPass_data() {
    QTest::addColumn<QString>("dir");
    for (const auto& f : families()) QTest::newRow(f.c_str()) << QString::fromStdString((fixture(f, "ft3")).string());
    QTest::newRow("qwen3_moe") << QString::fromStdString(qwen3_checkpoint("qwen3-cache").string());
  }
  void cacheMatchesFullPass() {
    QFETCH(QString, dir);
    const auto model = load(dir.toStdString());
    std::vector<std::int64_t> ids;
    for (int i = 0; i < 20; ++i) ids.push_back((i * 37 + 5) % model->spec().vocab_size);
    const auto full = all_logits(*model, ids, 1);
    const std::int64_t V = model->spec().vocab_size;

    KvCache cache(model->spec(), 1, 20);
    std::vector<float> stepwise = forward(*model, cache, std::span(ids).first(8), LogitsFor::AllPositions).values;
    for (std::size_t i = 8; i < ids.size(); ++i) {
      const auto row = forward(*model, cache, std::span(ids).subspan(i, 1), LogitsFor::LastPosition).values;
      stepwise.insert(stepwise.end(), row.begin(), row.end());
    }
    QCOMPARE(cache.position(), std::int64_t(20));
    QCOMPARE(stepwise.size(), std::size_t(20 * V));
    QVERIFY(relative_error(stepwise, full) < 1e-5);
  }

  // Qwen3-MoE normalizes q and k per head: scaling one head's projection rows leaves the output
  // unchanged. Normalizing over the whole projection (OLMoE) does not have this property, which
  // the second half shows with the same edit, so the test tells the two designs apart.
  void qwen3PerHeadQkNorm() {
    const fs::path a = qwen3_checkpoint("qwen3-a");
    const fs::path b = copy_checkpoint(a, scratch("qwen3-b"));
    const std::int64_t hd = 32;
    scale_rows(b, "self_attn.q_proj.weight", hd, 3.0f);  // query head 0
    scale_rows(b, "self_attn.k_proj.weight", hd, 0.25f);  // kv head 0
    std::vector<std::int64_t> ids{3, 14, 15, 92, 65, 35, 89, 79, 32, 38};
    const auto base = all_logits(*load(a), ids, 1);
    QVERIFY(std::all_of(base.begin(), base.end(), [](float x) { return std::isfinite(x); }));
    QVERIFY(relative_error(all_logits(*load(b), ids, 1), base) < 1e-5);

    const fs::path o = copy_checkpoint(fixture("olmoe", "base"), scratch("olmoe-scaled"));
    scale_rows(o, "self_attn.q_proj.weight", 16, 3.0f);
    const auto olmoe = all_logits(*load(fixture("olmoe", "base")), ids, 1);
    QVERIFY(relative_error(all_logits(*load(o), ids, 1), olmoe) > 1e-3);
  }

  // OLMoE clamps q, k and v to ±clip_qkv after its q/k norms; no fixture sets clip_qkv, so these are
  // properties: a clip wider than every value changes nothing, a tight one changes the logits, and as
  // it comes after the norm, q_proj scaled whole still changes nothing under it.
  void olmoeClipQkvClampsAfterTheNorms() {
    const std::vector<std::int64_t> ids{3, 14, 15, 92, 65, 35, 89, 79, 32, 38};
    const auto base = all_logits(*load(fixture("olmoe", "base")), ids, 1);
    const fs::path wide = copy_checkpoint(fixture("olmoe", "base"), scratch("olmoe-clip-wide"));
    patch_config(wide, "clip_qkv", 1e6);
    QCOMPARE(all_logits(*load(wide), ids, 1), base);
    const fs::path tight = copy_checkpoint(fixture("olmoe", "base"), scratch("olmoe-clip-tight"));
    patch_config(tight, "clip_qkv", 0.05);
    const auto tight_logits = all_logits(*load(tight), ids, 1);
    const double changed = relative_error(tight_logits, base);
    QVERIFY2(changed > 0.05, qPrintable(QString::number(changed)));
    scale_rows(tight, "self_attn.q_proj.weight", 64, 10.0f);  // every row of q_proj: 4 heads of 16
    QVERIFY2(relative_error(all_logits(*load(tight), ids, 1), tight_logits) < 1e-5, "the clip came before the q norm");
  }

  void rejectsBadRequests() {
    const auto model = load(fixture("mixtral", "base"));
    KvCache cache(model->spec(), 1, 4);
    const std::vector<std::int64_t> bad{1, 320};
    expect_mentions(error_of<InvalidArgument>([&] { forward(*model, cache, bad, LogitsFor::LastPosition); }),
                    {"token id 320", "outside the vocabulary"});
    QCOMPARE(cache.position(), std::int64_t(0));  // a refused call changes nothing
    const std::vector<std::int64_t> five{1, 2, 3, 4, 5};
    expect_mentions(error_of<InvalidArgument>([&] { forward(*model, cache, five, LogitsFor::LastPosition); }),
                    {"5 tokens", "KV cache"});
    KvCache pair(model->spec(), 2, 4);
    const std::vector<std::int64_t> odd{1, 2, 3};
    expect_mentions(error_of<InvalidArgument>([&] { forward(*model, pair, odd, LogitsFor::LastPosition); }), {"2 equal rows"});
  }
};

QTEST_GUILESS_MAIN(TestForward)
#include "tst_forward.moc"
