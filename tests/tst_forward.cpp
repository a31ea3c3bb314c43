// The CPU reference forward pass against transformers: logits and greedy continuations of every
// variant of every fixture family, the KV cache against the full pass, and what no fixture has,
// through properties only that design has: Qwen3-MoE's per-head q/k norms, OLMoE's clip_qkv.
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/checkpoint.h"
#include "model/synthetic.h"
#include "runtime/cpu_ops.h"
#include "runtime/cpu_rows.h"
#include "runtime/cuda/step_inputs.h"
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

  // A synthetic DeepSeek checkpoint of the given config: written as transformers 5 would (the config
  // round-trips through to_config_json), random fp32 weights.
  fs::path deepseek_checkpoint(const std::string& name, const std::string& config, std::uint64_t seed = 5) {
    const ModelSpec s = parse_model_spec(config, name);
    const fs::path dir = scratch(name);
    if (!fs::exists(dir)) write_synthetic_checkpoint(dir, s, DType::F32, seed);
    return dir;
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

  // DeepSeek-V2 and V3 against transformers (tests/data/hf-tiny/make_deepseek.py made the fixtures with
  // transformers 5.17 on the GPU machine). esft-released is DeepSeek's adapter format over base: its
  // reference is esft1's.
  void deepseekMatchesTransformers_data() {
    QTest::addColumn<QString>("family");
    QTest::addColumn<QString>("variant");
    for (const char* f : {"deepseek_v2", "deepseek_v3"})
      for (const char* v : {"base", "ft1", "esft1", "esft-released"}) QTest::newRow((std::string(f) + "/" + v).c_str()) << f << v;
  }
  void deepseekMatchesTransformers() {
    QFETCH(QString, family);
    QFETCH(QString, variant);
    const fs::path dir = fixture(family.toStdString());
    QVERIFY2(fs::exists(dir / "reference.safetensors"), "tests/data/hf-tiny/make_deepseek.py makes it, on a machine with transformers");
    const SafetensorsFile ref(dir / "reference.safetensors");
    const auto ids = read_i64(ref, "input_ids");
    const auto model = Model::load(Checkpoint(dir / variant.toStdString(), dir / "base"));
    const double err = relative_error(all_logits(*model, ids, 2), read_f32(ref, "logits." + variant.toStdString()));
    QVERIFY2(err <= 1e-4, qPrintable(QStringLiteral("relative error %1").arg(err)));
    const auto greedy = read_i64(ref, "greedy." + variant.toStdString());
    const GenerationResult r = generate(*model, {.prompt = {greedy.begin(), greedy.begin() + 12}, .max_new_tokens = 10});
    QCOMPARE(r.tokens, std::vector<std::int64_t>(greedy.begin() + 12, greedy.end()));
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
    QTest::newRow("deepseek_v2") << QString::fromStdString(deepseek_checkpoint("deepseek-v2", deepseek_v2_config()).string());
    QTest::newRow("deepseek_v3") << QString::fromStdString(deepseek_checkpoint("deepseek-v3", deepseek_v3_config()).string());
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

  // The parts of DeepSeek's forward pass that properties pin down, on configs no fixture has.
  // A synthetic checkpoint written from the config reads back as the same model.
  void deepseekConfigsRoundTrip() {
    for (const std::string& config : {deepseek_v2_config(), deepseek_v3_config()}) {
      const ModelSpec given = parse_model_spec(config, "given");
      const fs::path dir = deepseek_checkpoint(std::string(given.model_type()) + "-roundtrip", config);
      const ModelSpec written = load_model_spec(dir / "config.json");
      QCOMPARE(first_difference(given, written).value_or(""), std::string());
      QVERIFY(given.mla && written.mla);
      QCOMPARE(written.rope_scaling.kind, RopeKind::Yarn);
    }
  }

  // The rotary key is shared by every head and rotated once; scaling the latent's norm weight by a
  // constant c scales every key's and value's no-rope part by c: not a symmetry, so the logits move.
  // Scaling kv_a_proj's latent rows instead changes nothing (the latent is normalized after it), while
  // scaling its rotary-key rows does: the split between latent and rotary key is where DeepSeek puts it.
  void deepseekLatentSplit() {
    const std::vector<std::int64_t> ids{3, 14, 15, 92, 65, 35, 89, 79, 32, 38};
    for (const std::string& config : {deepseek_v2_config(), deepseek_v3_config()}) {
      const ModelSpec spec = parse_model_spec(config, "c");
      const fs::path a = deepseek_checkpoint(std::string(spec.model_type()) + "-split", config);
      const auto base = all_logits(*load(a), ids, 1);
      QVERIFY(std::all_of(base.begin(), base.end(), [](float x) { return std::isfinite(x); }));
      const fs::path latent = copy_checkpoint(a, scratch(std::string(spec.model_type()) + "-latent-scaled"));
      scale_rows(latent, "self_attn.kv_a_proj_with_mqa.weight", spec.mla->kv_lora_rank, 4.0f);
      QVERIFY2(relative_error(all_logits(*load(latent), ids, 1), base) < 1e-4, "the latent is not normalized after kv_a_proj");
      const fs::path all = copy_checkpoint(a, scratch(std::string(spec.model_type()) + "-all-scaled"));
      scale_rows(all, "self_attn.kv_a_proj_with_mqa.weight", spec.mla->kv_lora_rank + spec.mla->rope_dim, 4.0f);
      QVERIFY2(relative_error(all_logits(*load(all), ids, 1), base) > 1e-3, "the rotary key rows changed nothing");
    }
  }

  // DeepSeek's expert choice on logits built so that the answer is known. V2's group_limited_greedy
  // (groups of 2, the 2 of highest best probability kept) takes 3 experts: the third best overall (4,
  // in the third group) loses to the best left in the kept groups (3). V3's noaux_tc: sigmoid scores,
  // the correction bias steers the choice (expert 7, scored low, is chosen) but the weights are the
  // unbiased scores, renormalized and scaled.
  void deepseekExpertChoice() {
    ModelSpec v2 = parse_model_spec(deepseek_v2_config(), "v2");
    v2.top_k = 3;
    const std::vector<double> p{0.30, 0.01, 0.20, 0.02, 0.19, 0.18, 0.05, 0.05};  // softmax(log p) = p
    std::vector<float> logp;
    for (double x : p) logp.push_back(static_cast<float>(std::log(x)));
    const at::Tensor logits = at::tensor(logp, at::kFloat).view({1, 8});
    auto [w, i] = cpu::route_tokens(v2, logits);
    std::vector<std::int64_t> ids(i.data_ptr<std::int64_t>(), i.data_ptr<std::int64_t>() + 3);
    QCOMPARE(ids, (std::vector<std::int64_t>{0, 2, 3}));
    QVERIFY(std::abs(w[0][0].item<float>() - 0.30f * 2.0f) < 1e-6);  // the probability times routed_scaling_factor 2
    QVERIFY(std::abs(w[0][2].item<float>() - 0.02f * 2.0f) < 1e-6);
    v2.expert_choice = ExpertChoice::TopK;  // greedy takes the three best overall
    i = cpu::route_tokens(v2, logits).ids;
    QCOMPARE(std::vector<std::int64_t>(i.data_ptr<std::int64_t>(), i.data_ptr<std::int64_t>() + 3), (std::vector<std::int64_t>{0, 2, 4}));

    const ModelSpec v3 = parse_model_spec(deepseek_v3_config(), "v3");  // 4 groups of 2, 2 kept, top-2, scale 2.5
    const std::vector<double> s{0.90, 0.10, 0.60, 0.55, 0.50, 0.45, 0.05, 0.04};
    std::vector<float> logit, bias{0, 0, 0, 0, 0, 0, 0, 0.9f};  // biased: group 3 sums 0.05 + 0.94
    for (double x : s) logit.push_back(static_cast<float>(std::log(x / (1 - x))));
    const auto r = cpu::route_tokens(v3, at::tensor(logit, at::kFloat).view({1, 8}), at::tensor(bias, at::kFloat));
    // Group scores (sum of the two best biased): g0 1.00, g1 1.15, g2 0.95, g3 0.99 → g1 and g0 kept.
    std::vector<std::int64_t> chosen(r.ids.data_ptr<std::int64_t>(), r.ids.data_ptr<std::int64_t>() + 2);
    std::sort(chosen.begin(), chosen.end());
    QCOMPARE(chosen, (std::vector<std::int64_t>{0, 2}));
    const at::Tensor again = cpu::route_tokens(v3, at::tensor(logit, at::kFloat).view({1, 8}), at::tensor(std::vector<float>{0, 0, 0, 0, 0, 0, 0, 2.0f}, at::kFloat)).ids;
    std::vector<std::int64_t> steered(again.data_ptr<std::int64_t>(), again.data_ptr<std::int64_t>() + 2);
    std::sort(steered.begin(), steered.end());
    QCOMPARE(steered, (std::vector<std::int64_t>{2, 7}));  // the bias made group 3 win over group 0, and expert 7 beat expert 3
    const float sum = 0.60f + 0.04f;
    const at::Tensor wv = cpu::route_tokens(v3, at::tensor(logit, at::kFloat).view({1, 8}), at::tensor(std::vector<float>{0, 0, 0, 0, 0, 0, 0, 2.0f}, at::kFloat)).weights;
    const float w0 = std::max(wv[0][0].item<float>(), wv[0][1].item<float>()), w1 = std::min(wv[0][0].item<float>(), wv[0][1].item<float>());
    QVERIFY(std::abs(w0 - 0.60f / sum * 2.5f) < 1e-5);
    QVERIFY(std::abs(w1 - 0.04f / sum * 2.5f) < 1e-5);  // the unbiased score, not 0.04 + 2
  }

  // The batched step's routing loop (route_rows) chooses what route_tokens chooses, with the same
  // weights to float rounding: Mixtral's softmax top-2 renormalized, DeepSeek-V2's greedy top-6 of 64
  // scaled and not renormalized, each with and without masked experts; V3's sigmoid group choice
  // goes through route_tokens itself and is equal bit for bit.
  void routeRowsChoosesAsRouteTokens() {
    ModelSpec v2 = parse_model_spec(deepseek_v2_config(), "v2");
    v2.expert_choice = ExpertChoice::TopK;
    v2.num_experts = 64;
    v2.top_k = 6;
    v2.n_group = 1;
    const ModelSpec mixtral = mixtral_like_spec(64, 32, 64, 1, 8), v3 = parse_model_spec(deepseek_v3_config(), "v3");
    std::mt19937 gen(4);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (const ModelSpec* s : std::initializer_list<const ModelSpec*>{&mixtral, &v2, &v3}) {
      const std::int64_t n = 7, E = s->num_experts, k = s->top_k;
      std::vector<float> values(static_cast<std::size_t>(n * E));
      for (float& v : values) v = normal(gen);
      const at::Tensor logits = at::tensor(values, at::kFloat).view({n, E});
      const at::Tensor bias = s->router_bias ? at::rand({E}, at::kFloat) : at::Tensor();
      for (bool masking : {false, true}) {
        at::Tensor absent;
        if (masking && s->router_scoring == RouterScoring::Softmax) {  // every third expert of each token absent
          absent = at::zeros({n, E}, at::kBool);
          for (std::int64_t t = 0; t < n; ++t)
            for (std::int64_t e = t % 3; e < E; e += 3) absent.data_ptr<bool>()[t * E + e] = true;
        }
        const cpu::Routed want = cpu::route_tokens(*s, logits, bias, absent);
        std::vector<std::int64_t> ids(static_cast<std::size_t>(n * k));
        std::vector<float> weights(ids.size());
        cpu::route_rows(*s, logits, bias, absent, ids.data(), weights.data());
        const QString what = QStringLiteral("%1 experts, top %2%3").arg(E).arg(k).arg(masking ? QStringLiteral(", masked") : QString());
        for (std::int64_t j = 0; j < n * k; ++j) {
          QVERIFY2(ids[static_cast<std::size_t>(j)] == want.ids.data_ptr<std::int64_t>()[j], qPrintable(what + QStringLiteral(": pair %1").arg(j)));
          const float w = want.weights.data_ptr<float>()[j], got = weights[static_cast<std::size_t>(j)];
          QVERIFY2(std::abs(got - w) <= 1e-6f * (1 + std::abs(w)), qPrintable(what + QStringLiteral(": weight %1 vs %2").arg(got).arg(w)));
          if (absent.defined()) QVERIFY(!absent.data_ptr<bool>()[j / k * E + ids[static_cast<std::size_t>(j)]]);
        }
      }
    }
  }

  // The CUDA backend's router (kernels' router_choice, checked against its reference on simt and the
  // GPU) chooses what route_tokens chooses: DeepSeek-V2's group-limited greedy, its greedy, V3's
  // biased sigmoid groups, each on the fixtures' 8 experts and on 64 in 8 groups, masked (SwapMoE's
  // gating, through a reroute table as the device masks) or not.
  void deviceRouterRuleChoosesAsRouteTokens() {
    std::vector<ModelSpec> specs;
    for (const std::string& config : {deepseek_v2_config(), deepseek_v3_config()}) {
      ModelSpec s = parse_model_spec(config, "config.json");
      specs.push_back(s);
      s.num_experts = 64;
      s.top_k = 6;
      s.n_group = 8;
      s.topk_group = 3;
      specs.push_back(s);
      s.expert_choice = ExpertChoice::TopK;
      specs.push_back(s);
    }
    std::mt19937 gen(9);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (const ModelSpec& s : specs) {
      const std::int64_t n = 23, E = s.num_experts, k = s.top_k;
      std::vector<float> values(static_cast<std::size_t>(n * E)), bias(static_cast<std::size_t>(E));
      for (float& v : values) v = normal(gen);
      for (float& v : bias) v = 0.1f * normal(gen);
      for (bool masking : {false, true}) {
        // Masked: every third expert of each token absent, or all but two (too few for the kept
        // groups: masked experts are chosen and weigh their own scores). One table row per token.
        at::Tensor absent;
        std::vector<std::int32_t> table(static_cast<std::size_t>(n * E)), rows(static_cast<std::size_t>(n));
        std::iota(rows.begin(), rows.end(), 0);
        if (masking) {
          absent = at::zeros({n, E}, at::kBool);
          for (std::int64_t t = 0; t < n; ++t)
            for (std::int64_t e = 0; e < E; ++e) {
              const bool out = t % 4 == 3 ? e != 1 && e != E - 1 : e % 3 == t % 3;
              absent.data_ptr<bool>()[t * E + e] = out;
              table[static_cast<std::size_t>(t * E + e)] = out ? -1 : 0;
            }
        }
        const at::Tensor b = s.router_bias ? at::tensor(bias, at::kFloat) : at::Tensor();
        const cpu::Routed want = cpu::route_tokens(s, at::tensor(values, at::kFloat).view({n, E}), b, absent);
        kernels::RouterRule rule = cuda::router_rule(s, s.router_bias ? bias.data() : nullptr);
        QVERIFY(kernels::router_rule_valid(rule, static_cast<int>(E), static_cast<int>(k)));
        if (masking) {
          rule.table = table.data();
          rule.rows = rows.data();
        }
        std::vector<std::int32_t> ids(static_cast<std::size_t>(n * k));
        std::vector<float> weights(ids.size());
        kernels::router_choice_reference(values.data(), static_cast<int>(n), static_cast<int>(E), static_cast<int>(k), rule, ids.data(), weights.data());
        const QString what = QStringLiteral("%1, %2 experts%3").arg(QString::fromStdString(std::string(s.model_type()))).arg(E).arg(masking ? QStringLiteral(", masked") : QString());
        for (std::int64_t j = 0; j < n * k; ++j) {
          QVERIFY2(ids[static_cast<std::size_t>(j)] == want.ids.data_ptr<std::int64_t>()[j], qPrintable(what + QStringLiteral(": pair %1: %2 vs %3").arg(j).arg(ids[static_cast<std::size_t>(j)]).arg(want.ids.data_ptr<std::int64_t>()[j])));
          const float w = want.weights.data_ptr<float>()[j], got = weights[static_cast<std::size_t>(j)];
          QVERIFY2(std::abs(got - w) <= 1e-6f * (1 + std::abs(w)), qPrintable(what + QStringLiteral(": weight %1 vs %2").arg(got).arg(w)));
        }
      }
    }
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
