// config.json → ModelSpec: the fixtures' exact semantics, Qwen3-MoE from its definition, and every
// option the engine refuses rather than computing a silently wrong model.
#include <QTemporaryDir>
#include <QTest>

#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/arch.h"
#include "model/model_spec.h"
#include "model/rope.h"
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
    QTest::newRow("dbrx") << "mixtral" << R"({"model_type": "dbrx"})" << "dbrx";
    QTest::newRow("no model_type") << "olmoe" << R"({"model_type": null})" << "'model_type'";
    QTest::newRow("mixtral sliding window") << "mixtral" << R"({"sliding_window": 4096})" << "'sliding_window'";
    QTest::newRow("qwen sliding window") << "qwen2_moe" << R"({"use_sliding_window": true})" << "'use_sliding_window'";
    QTest::newRow("sliding layers") << "qwen2_moe" << R"({"layer_types": ["full_attention", "sliding_attention", "full_attention"]})" << "'layer_types'";
    QTest::newRow("rope scaling v4") << "olmoe" << R"({"rope_scaling": {"type": "linear", "factor": 4.0}})" << "'rope_scaling.rope_type'";
    QTest::newRow("rope scaling dynamic") << "olmoe" << R"({"rope_scaling": {"rope_type": "dynamic", "factor": 4.0}})" << "dynamic";
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

  // DeepSeek-V2-Lite's config.json as DeepSeek released it (its own spellings: rope_scaling with
  // "type", n_routed_experts, q_lora_rank null) and V3's.
  // A quantized release's config reads (the simulated clock needs only its shapes), saying its method,
  // which a Checkpoint refuses (tst_checkpoint).
  void quantizedReleasesSayTheirMethod() {
    json j = json::parse(deepseek_v3_config());
    QCOMPARE(parse(j).quantization, std::string());
    j["quantization_config"] = json::parse(R"({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]})");
    QCOMPARE(parse(j).quantization, std::string("fp8"));
    j["quantization_config"] = json::object();
    QCOMPARE(parse(j).quantization, std::string("unnamed"));
    j["quantization_config"] = nullptr;
    QCOMPARE(parse(j).quantization, std::string());
  }

  void deepseekReleasedConfigs() {
    const json lite = {{"model_type", "deepseek_v2"}, {"vocab_size", 102400}, {"hidden_size", 2048}, {"intermediate_size", 10944},
                       {"moe_intermediate_size", 1408}, {"num_hidden_layers", 27}, {"num_attention_heads", 16}, {"num_key_value_heads", 16},
                       {"n_shared_experts", 2}, {"n_routed_experts", 64}, {"routed_scaling_factor", 1.0}, {"kv_lora_rank", 512},
                       {"q_lora_rank", nullptr}, {"qk_rope_head_dim", 64}, {"v_head_dim", 128}, {"qk_nope_head_dim", 128},
                       {"topk_method", "greedy"}, {"n_group", 1}, {"topk_group", 1}, {"num_experts_per_tok", 6}, {"moe_layer_freq", 1},
                       {"first_k_dense_replace", 1}, {"norm_topk_prob", false}, {"scoring_func", "softmax"}, {"aux_loss_alpha", 0.001},
                       {"seq_aux", true}, {"hidden_act", "silu"}, {"max_position_embeddings", 163840}, {"rms_norm_eps", 1e-6},
                       {"rope_theta", 10000}, {"attention_bias", false}, {"bos_token_id", 100000}, {"eos_token_id", 100001},
                       {"tie_word_embeddings", false},
                       {"rope_scaling", {{"beta_fast", 32}, {"beta_slow", 1}, {"factor", 40}, {"mscale", 0.707}, {"mscale_all_dim", 0.707},
                                         {"original_max_position_embeddings", 4096}, {"type", "yarn"}}}};
    const ModelSpec s = parse(lite);
    QCOMPARE(s.arch, Arch::DeepseekV2);
    QVERIFY(s.mla && s.mla->q_lora_rank == 0 && s.mla->kv_lora_rank == 512);
    QCOMPARE(s.head_dim, std::int64_t(192));  // 128 + 64: the query and key width of a head
    QCOMPARE(s.o_width(), std::int64_t(16 * 128));
    QCOMPARE(s.kv_cache_width(), std::int64_t(576));  // what a token caches per layer, against 2 × 16 × 192 of full K and V
    QCOMPARE(s.num_sparse_layers(), std::int64_t(26));
    QVERIFY(!s.is_sparse(0) && s.is_sparse(1) && s.is_sparse(26));
    QCOMPARE(s.dense_intermediate, std::int64_t(10944));
    QCOMPARE(s.shared_expert_intermediate, std::int64_t(2816));
    QVERIFY(!s.shared_expert_gated && s.rope_interleaved && !s.router_bias);
    QCOMPARE(s.expert_choice, ExpertChoice::TopK);
    QCOMPARE(s.rope_scaling.kind, RopeKind::Yarn);
    QCOMPARE(s.rope_scaling.attention_factor, 1.0);  // mscale / mscale_all_dim
    // The softmax scale: 192^-1/2 × yarn_get_mscale(40, 0.707)² (transformers ≥ 5.15, DeepSeek's own code).
    QVERIFY(std::abs(s.softmax_scale() - 0.1147213867929261) < 1e-12);
    // YaRN over 64 rotary dims, base 1e4, 4096 → 163840 positions: dims 0–10 keep their frequency,
    // 23 and up are 40 times slower, the ones between are blended.
    const auto inv = rope_inverse_frequencies(s);
    QCOMPARE(inv.size(), std::size_t(32));
    auto plain = [](double i) { return 1.0 / std::pow(10000.0, 2 * i / 64); };
    for (int i = 0; i <= 10; ++i) QVERIFY(std::abs(inv[i] / plain(i) - 1) < 1e-12);
    for (int i = 23; i < 32; ++i) QVERIFY(std::abs(inv[i] * 40 / plain(i) - 1) < 1e-12);
    for (int i = 11; i < 23; ++i) QVERIFY(inv[i] < plain(i) && inv[i] > plain(i) / 40);

    json v3 = lite;
    v3.update({{"model_type", "deepseek_v3"}, {"q_lora_rank", 1536}, {"n_routed_experts", 256}, {"n_shared_experts", 1},
               {"num_experts_per_tok", 8}, {"n_group", 8}, {"topk_group", 4}, {"topk_method", "noaux_tc"}, {"scoring_func", "sigmoid"},
               {"norm_topk_prob", true}, {"routed_scaling_factor", 2.5}, {"first_k_dense_replace", 3}, {"num_hidden_layers", 61},
               {"num_nextn_predict_layers", 1}});
    v3["rope_scaling"]["mscale"] = 1.0;
    v3["rope_scaling"]["mscale_all_dim"] = 1.0;
    const ModelSpec t = parse(v3);
    QCOMPARE(t.arch, Arch::DeepseekV3);
    QVERIFY(t.router_bias && t.router_scoring == RouterScoring::Sigmoid && t.expert_choice == ExpertChoice::GroupTopTwo);
    QVERIFY(t.norm_topk_prob && t.mla->q_lora_rank == 1536 && t.mtp_layers == 1);
    QCOMPARE(t.num_sparse_layers(), std::int64_t(58));
    QVERIFY(std::abs(t.softmax_scale() - 0.1352337788608801) < 1e-12);

    // transformers 5's spellings read the same: rope_parameters, and the expert count's alias.
    json v5 = lite;
    v5.erase("rope_scaling");
    v5.erase("n_routed_experts");
    v5["num_experts"] = 64;
    v5["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 40.0}, {"original_max_position_embeddings", 4096},
                             {"beta_fast", 32.0}, {"beta_slow", 1.0}, {"mscale", 0.707}, {"mscale_all_dim", 0.707}};
    QCOMPARE(first_difference(parse(v5), s).value_or(""), std::string());
    json absent = lite;
    absent.erase("q_lora_rank");  // transformers' default, not none
    QCOMPARE(parse(absent).mla->q_lora_rank, std::int64_t(1536));
  }

  // What DeepSeek's configs may say that Mosaic does not compute, or that would mean two models.
  void deepseekRefusals_data() {
    QTest::addColumn<QString>("arch");
    QTest::addColumn<QString>("patch");
    QTest::addColumn<QString>("mentions");
    QTest::newRow("v2 norm_topk_prob") << "v2" << R"({"norm_topk_prob": true})" << "norm_topk_prob";
    QTest::newRow("v2 sigmoid") << "v2" << R"({"scoring_func": "sigmoid"})" << "scoring_func";
    QTest::newRow("v2 topk method") << "v2" << R"({"topk_method": "noaux_tc"})" << "topk_method";
    QTest::newRow("v3 greedy") << "v3" << R"({"topk_method": "greedy"})" << "topk_method";
    QTest::newRow("groups not dividing") << "v2" << R"({"n_group": 3})" << "n_group";
    QTest::newRow("too few left") << "v3" << R"({"topk_group": 0})" << "topk_group";
    QTest::newRow("kv heads") << "v2" << R"({"num_key_value_heads": 2})" << "num_key_value_heads";
    QTest::newRow("odd rope dim") << "v3" << R"({"qk_rope_head_dim": 7})" << "qk_rope_head_dim";
    QTest::newRow("dense past the end") << "v2" << R"({"first_k_dense_replace": 9})" << "first_k_dense_replace";
    QTest::newRow("yarn factor") << "v3" << R"({"rope_parameters": {"rope_type": "yarn", "factor": 0.5}})" << "factor";
  }
  void deepseekRefusals() {
    QFETCH(QString, arch);
    QFETCH(QString, patch);
    QFETCH(QString, mentions);
    json j = json::parse(arch == QLatin1String("v2") ? deepseek_v2_config() : deepseek_v3_config());
    j.update(json::parse(patch.toStdString()));
    expect_mentions(error_of<Error>([&] { parse(j); }), {"config.json", mentions.toStdString()});
  }

  // Llama 3.1's rope scaling: short wavelengths kept, long ones slowed by the factor, a smooth band
  // between (transformers' _compute_llama3_parameters), on a Mixtral config.
  void llama3RopeScaling() {
    json j = fixture_config("mixtral");
    j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 64}};
    const ModelSpec s = parse(j);
    const auto inv = rope_inverse_frequencies(s);
    const double pi = 3.14159265358979323846;
    int kept = 0, slowed = 0, blended = 0;
    for (std::size_t i = 0; i < inv.size(); ++i) {
      const double plain = 1.0 / std::pow(s.rope_theta, 2.0 * static_cast<double>(i) / static_cast<double>(s.head_dim));
      const double wavelen = 2 * pi / plain;
      if (wavelen < 64 / 4.0) kept += std::abs(inv[i] / plain - 1) < 1e-12;
      else if (wavelen > 64 / 1.0) slowed += std::abs(inv[i] * 8 / plain - 1) < 1e-12;
      else blended += inv[i] < plain && inv[i] > plain / 8;
    }
    QCOMPARE(kept + slowed + blended, static_cast<int>(inv.size()));
    QVERIFY(kept > 0 && slowed > 0 && blended > 0);
    j["rope_scaling"].erase("low_freq_factor");
    expect_mentions(error_of<FormatError>([&] { parse(j); }), {"rope_scaling.low_freq_factor", "llama3"});
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
