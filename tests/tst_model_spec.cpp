// config.json → ModelSpec: the fixtures' exact semantics, Qwen3-MoE from its definition, and every
// option the engine refuses rather than computing a silently wrong model.
#include <QTemporaryDir>
#include <QTest>

#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/arch.h"
#include "model/model_spec.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;
using nlohmann::json;

namespace {
json qwen3_config() { return json::parse(qwen3_moe_config()); }
ModelSpec parse(const json& j) { return parse_model_spec(j.dump(), "config.json"); }
json fixture_config(const std::string& family) {
  std::ifstream in(fixture(family, "base") / "config.json");
  return json::parse(in);
}
}  // namespace

class TestModelSpec : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  void mixtralFixture() {
    const ModelSpec s = load_model_spec(fixture("mixtral", "base") / "config.json");
    QCOMPARE(s.arch, Arch::Mixtral);
    QCOMPARE(s.num_experts, 8);
    QCOMPARE(s.top_k, 2);
    QVERIFY(s.norm_topk_prob);  // Mixtral always renormalizes, whatever the config says
    QCOMPARE(s.expert_intermediate, 96);
    QCOMPARE(s.head_dim, 16);   // head_dim: null → hidden / heads
    QCOMPARE(s.rope_theta, 10000.0);  // from transformers 5's rope_parameters, not Mixtral's 1e6 default
    QCOMPARE(s.rms_norm_eps, 1e-6);
    QCOMPARE(s.bos_token_id.value_or(-1), 1);
    QCOMPARE(s.eos_token_ids, std::vector<std::int64_t>{2});
    QVERIFY(!s.qkv_bias && !s.o_bias && s.qk_norm == QkNorm::None && s.shared_expert_intermediate == 0);
    QCOMPARE(s.num_sparse_layers(), 3);
  }

  void qwen2MoeFixture() {
    const ModelSpec s = load_model_spec(fixture("qwen2_moe", "base") / "config.json");
    QCOMPARE(s.arch, Arch::Qwen2Moe);
    QVERIFY(!s.norm_topk_prob);
    QCOMPARE(s.expert_intermediate, 48);
    QCOMPARE(s.shared_expert_intermediate, 96);
    QVERIFY(s.qkv_bias && !s.o_bias);
    QCOMPARE(s.num_sparse_layers(), 3);
    QCOMPARE(s.dense_intermediate, 0);  // no dense layers
  }

  void olmoeFixture() {
    const ModelSpec s = load_model_spec(fixture("olmoe", "base") / "config.json");
    QCOMPARE(s.arch, Arch::Olmoe);
    QCOMPARE(s.qk_norm, QkNorm::Whole);
    QVERIFY(!s.clip_qkv);
    QCOMPARE(s.expert_intermediate, 48);
    QVERIFY(s.eos_token_ids.empty());  // tests/data says null where transformers wrote its default 50279
  }

  // A stop id the vocabulary does not hold could never be sampled: generation would silently run to
  // its length. Refused naming the field, as a bos id past it is.
  void tokenIdsOutsideTheVocabularyAreRefused() {
    for (const char* key : {"eos_token_id", "bos_token_id"})
      for (const json& id : {json(320), json(50279), json(-1), json::array({2, 320})}) {
        json j = fixture_config("olmoe");
        if (std::string(key) == "bos_token_id" && id.is_array()) continue;
        j[key] = id;
        try {
          parse(j);
          QFAIL((std::string(key) + " = " + id.dump() + " was accepted").c_str());
        } catch (const mosaic::FormatError& e) {
          QVERIFY2(std::string(e.what()).find(key) != std::string::npos, e.what());
          QVERIFY2(std::string(e.what()).find("320-token vocabulary") != std::string::npos, e.what());
        }
      }
    json j = fixture_config("olmoe");
    j["eos_token_id"] = 319;
    QCOMPARE(parse(j).eos_token_ids, std::vector<std::int64_t>{319});
  }

  void qwen3MoeFromDefinition() {
    const ModelSpec s = parse(qwen3_config());
    QCOMPARE(s.arch, Arch::Qwen3Moe);
    QCOMPARE(s.head_dim, 32);  // explicit, not hidden / heads = 16
    QCOMPARE(s.q_width(), 128);
    QCOMPARE(s.qk_norm, QkNorm::PerHead);
    QVERIFY(s.norm_topk_prob);
    QCOMPARE(s.sparse_layers, (std::vector<bool>{true, false, true, true}));
    QCOMPARE(s.dense_intermediate, 128);
    QCOMPARE(s.rope_theta, 1e6);

    json j = qwen3_config();
    j.erase("head_dim");
    expect_mentions(error_of<MissingError>([&] { parse(j); }), {"config.json", "'head_dim'"});
  }

  void decoderSparseStep() {
    json j = qwen3_config();
    j["decoder_sparse_step"] = 2;
    j["mlp_only_layers"] = json::array();
    QCOMPARE(parse(j).sparse_layers, (std::vector<bool>{false, true, false, true}));
    j["mlp_only_layers"] = {7};
    expect_mentions(error_of<FormatError>([&] { parse(j); }), {"'mlp_only_layers'", "layer 7"});
  }

  void olmoeClipAndBias() {
    json j = fixture_config("olmoe");
    j["clip_qkv"] = 8.0;
    j["attention_bias"] = true;
    const ModelSpec s = parse(j);
    QCOMPARE(s.clip_qkv.value_or(0), 8.0);
    QVERIFY(s.qkv_bias && s.o_bias);
  }

  void refusesUnimplemented_data() {
    QTest::addColumn<QString>("family");
    QTest::addColumn<QString>("patch");  // JSON merged into the fixture's config
    QTest::addColumn<QString>("field");
    QTest::newRow("llama") << "mixtral" << R"({"model_type": "llama"})" << "'model_type'";
    QTest::newRow("deepseek") << "mixtral" << R"({"model_type": "deepseek_v2"})" << "deepseek_v2";
    QTest::newRow("no model_type") << "olmoe" << R"({"model_type": null})" << "'model_type'";
    QTest::newRow("mixtral sliding window") << "mixtral" << R"({"sliding_window": 4096})" << "'sliding_window'";
    QTest::newRow("qwen sliding window") << "qwen2_moe" << R"({"use_sliding_window": true})" << "'use_sliding_window'";
    QTest::newRow("sliding layers") << "qwen2_moe" << R"({"layer_types": ["full_attention", "sliding_attention", "full_attention"]})" << "'layer_types'";
    QTest::newRow("rope scaling v4") << "olmoe" << R"({"rope_scaling": {"type": "yarn", "factor": 4.0}})" << "'rope_scaling'";
    QTest::newRow("rope type v5") << "olmoe" << R"({"rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}})" << "rope_type";
    QTest::newRow("partial rotary") << "mixtral" << R"({"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}})" << "partial_rotary_factor";
    QTest::newRow("gelu") << "mixtral" << R"({"hidden_act": "gelu"})" << "'hidden_act'";
  }
  void refusesUnimplemented() {
    QFETCH(QString, family);
    QFETCH(QString, patch);
    QFETCH(QString, field);
    json j = fixture_config(family.toStdString());
    j.merge_patch(json::parse(patch.toStdString()));
    if (j.contains("model_type") && j["model_type"].is_null()) j.erase("model_type");
    expect_mentions(error_of<UnsupportedError>([&] { parse(j); }), {"config.json", field.toStdString()});
  }

  void rejectsMalformed_data() {
    QTest::addColumn<QString>("patch");
    QTest::addColumn<QString>("field");
    QTest::newRow("negative size") << R"({"hidden_size": -64})" << "'hidden_size'";
    QTest::newRow("string size") << R"({"num_hidden_layers": "3"})" << "'num_hidden_layers'";
    QTest::newRow("kv heads") << R"({"num_key_value_heads": 3})" << "'num_key_value_heads'";
    QTest::newRow("top-k") << R"({"num_experts_per_tok": 9})" << "'num_experts_per_tok'";
    QTest::newRow("eps") << R"({"rms_norm_eps": "small"})" << "'rms_norm_eps'";
    // Sizes no model has are refused before anything is allocated from them (a probe's hangs and
    // bad_allocs), and values that would compute a wrong model quietly.
    QTest::newRow("huge hidden") << R"({"hidden_size": 1099511627776})" << "'hidden_size'";
    QTest::newRow("huge layers") << R"({"num_hidden_layers": 1099511627776})" << "'num_hidden_layers'";
    QTest::newRow("huge experts") << R"({"num_local_experts": 1099511627776})" << "'num_local_experts'";
    QTest::newRow("huge vocab") << R"({"vocab_size": 1000000000000})" << "'vocab_size'";
    QTest::newRow("beyond int64") << R"({"hidden_size": 18446744073709551615})" << "'hidden_size'";
    QTest::newRow("zero eps") << R"({"rms_norm_eps": 0})" << "'rms_norm_eps'";
    QTest::newRow("huge eps") << R"({"rms_norm_eps": 1e308})" << "'rms_norm_eps'";
    QTest::newRow("huge theta") << R"({"rope_parameters": {"rope_type": "default", "rope_theta": 1e308}})" << "rope_theta";
    QTest::newRow("negative eos") << R"({"eos_token_id": [2, -1]})" << "'eos_token_id'";
    QTest::newRow("both spellings disagree") << R"({"num_experts": 4})" << "'num_local_experts'";
    QTest::newRow("huge theta at the top") << R"({"rope_parameters": null, "rope_theta": 1e308})" << "'rope_theta'";
    // A rope type of another JSON type was the JSON library's error, shown as an internal error.
    QTest::newRow("numeric rope type") << R"({"rope_parameters": {"rope_type": 5}})" << "'rope_parameters.rope_type'";
    QTest::newRow("list rope scaling type") << R"({"rope_scaling": {"type": ["linear"]}})" << "'rope_scaling.type'";
  }
  void rejectsMalformed() {
    QFETCH(QString, patch);
    QFETCH(QString, field);
    json j = fixture_config("mixtral");
    j.merge_patch(json::parse(patch.toStdString()));
    expect_mentions(error_of<FormatError>([&] { parse(j); }), {"config.json", field.toStdString()});
  }

  // A byte-order mark before config.json's text: transformers (Python's json) refuses it, so must Mosaic.
  void refusesByteOrderMark() {
    const std::string text = "\xEF\xBB\xBF" + fixture_config("mixtral").dump();
    expect_mentions(error_of<FormatError>([&] { parse_model_spec(text, "config.json"); }), {"config.json", "byte-order mark"});
  }

  // Every spelling transformers accepts gives the same ModelSpec: the expert count as
  // num_experts or num_local_experts (4.x and 5.x), rope_theta at the top or in rope_parameters.
  void everySpellingTransformersWrites() {
    std::vector<std::pair<std::string, json>> configs{{"qwen3_moe", qwen3_config()}};
    for (const auto& f : families()) configs.push_back({f, fixture_config(f)});
    for (auto& [name, j] : configs) {
      const ModelSpec want = parse(j);
      const ArchInfo& arch = arch_info(want.arch);
      json other = j;
      other[std::string(arch.experts_alias)] = other[std::string(arch.experts_key)];
      other.erase(std::string(arch.experts_key));
      auto diff = first_difference(want, parse(other));
      QVERIFY2(!diff, (name + ": " + diff.value_or("")).c_str());
      other[std::string(arch.experts_key)] = other[std::string(arch.experts_alias)];  // both, agreeing
      diff = first_difference(want, parse(other));
      QVERIFY2(!diff, (name + ": " + diff.value_or("")).c_str());
      json theta = j;  // rope_theta at the top (4.x) against inside rope_parameters (5.x)
      theta.erase("rope_parameters");
      theta["rope_theta"] = want.rope_theta;
      diff = first_difference(want, parse(theta));
      QVERIFY2(!diff, (name + ": " + diff.value_or("")).c_str());
      other.erase(std::string(arch.experts_key));
      other.erase(std::string(arch.experts_alias));
      expect_mentions(error_of<MissingError>([&] { parse(other); }), {std::string(arch.experts_key), std::string(arch.experts_alias)});
    }
  }

  void unreadableShapesOfInput() {
    json j = fixture_config("mixtral");
    j["torch_dtype"] = "float8";
    expect_mentions(error_of<UnsupportedError>([&] { parse(j); }), {"'torch_dtype'", "float8"});
    // A number beyond double's range, and nesting deeper than any config, are refused as format errors.
    expect_mentions(error_of<FormatError>([] { parse_model_spec(R"({"model_type": "mixtral", "hidden_size": 1e400})", "c.json"); }), {"c.json"});
    const std::string deep = R"({"model_type": "mixtral", "unused": )" + std::string(100000, '[') + std::string(100000, ']') + "}";
    expect_mentions(error_of<FormatError>([&] { parse_model_spec(deep, "c.json"); }), {"c.json", "deeper than"});
    json huge_theta = fixture_config("mixtral");
    huge_theta["rope_parameters"]["rope_theta"] = 1e308;
    expect_mentions(error_of<FormatError>([&] { parse(huge_theta); }), {"'rope_parameters.rope_theta'"});
    json shared = fixture_config("qwen2_moe");
    shared["shared_expert_intermediate_size"] = 1099511627776;
    expect_mentions(error_of<FormatError>([&] { parse(shared); }), {"'shared_expert_intermediate_size'", "at most"});
    shared["shared_expert_intermediate_size"] = 0;  // no shared expert
    QCOMPARE(parse(shared).shared_expert_intermediate, std::int64_t(0));
    // Many siblings parse in linear time (a parser callback made nlohmann rescan the parent at the end
    // of each nested object: 200k of them took minutes).
    std::string wide = R"({"model_type": "mixtral", "unused": {)";
    for (int i = 0; i < 200000; ++i) wide += (i ? ",\"k" : "\"k") + std::to_string(i) + "\": {}";
    wide += "}}";
    expect_mentions(error_of<MissingError>([&] { parse_model_spec(wide, "c.json"); }), {"'vocab_size'"});  // parsed whole, then read
    // A FIFO (its reader would wait for a writer forever) and a symbolic-link loop, where config.json should be.
    QTemporaryDir dir;
    const fs::path fifo = fs::path(dir.path().toStdString()) / "config.json";
    QCOMPARE(::mkfifo(fifo.c_str(), 0600), 0);
    expect_mentions(error_of<IoError>([&] { load_model_spec(fifo); }), {"config.json", "not a regular file"});
    const fs::path loop = fs::path(dir.path().toStdString()) / "loop.json";
    fs::create_symlink(loop, loop);
    expect_mentions(error_of<IoError>([&] { load_model_spec(loop); }), {"loop.json", "loop of symbolic links"});
  }

  void missingAndBrokenFiles() {
    json j = fixture_config("mixtral");
    j.erase("hidden_size");
    expect_mentions(error_of<MissingError>([&] { parse(j); }), {"'hidden_size'", "required"});
    expect_mentions(error_of<FormatError>([] { parse_model_spec("{\"model_type\": ", "x/config.json"); }), {"x/config.json", "not valid JSON"});
    expect_mentions(error_of<MissingError>([] { load_model_spec("/nonexistent/config.json"); }), {"/nonexistent/config.json"});
  }

  void configJsonRoundTrips() {
    std::vector<ModelSpec> specs{parse(qwen3_config())};
    for (const auto& f : families()) specs.push_back(parse(fixture_config(f)));
    for (const ModelSpec& s : specs) {
      const ModelSpec back = parse_model_spec(to_config_json(s), "roundtrip");
      const auto diff = first_difference(s, back);
      QVERIFY2(!diff, diff ? diff->c_str() : "");
    }
  }

  void firstDifferenceNamesTheField() {
    const ModelSpec a = parse(fixture_config("mixtral"));
    json j = fixture_config("mixtral");
    j["intermediate_size"] = 80;
    QCOMPARE(first_difference(a, parse(j)).value_or(""), std::string("moe_intermediate_size: 96 vs 80"));
    QCOMPARE(first_difference(a, parse(fixture_config("olmoe"))).value_or(""), std::string("model_type: mixtral vs olmoe"));
    QVERIFY(!first_difference(a, a));
  }
};

QTEST_GUILESS_MAIN(TestModelSpec)
#include "tst_model_spec.moc"
