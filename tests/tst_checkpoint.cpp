// Checkpoints against their configs, weight groups, and families of variants.
#include <QTemporaryDir>
#include <QTest>
#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/dtype_convert.h"
#include "model/family.h"
#include "model/synthetic.h"
#include "model/variant_folders.h"
#include "runtime/host_store.h"
#include "runtime/model.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

class TestCheckpoint : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  fs::path scratch(const std::string& name) const { return fs::path(tmp_.path().toStdString()) / name; }

 private Q_SLOTS:
  void initTestCase() { QVERIFY(tmp_.isValid()); }

  void weightGroupsCoverTheFile_data() {
    QTest::addColumn<QString>("family");
    for (const auto& f : families()) QTest::newRow(f.c_str()) << QString::fromStdString(f);
  }
  void weightGroupsCoverTheFile() {
    QFETCH(QString, family);
    const Checkpoint ck(fixture(family.toStdString(), "ft2"));
    const ModelSpec& s = ck.spec();
    QVERIFY(ck.unused_tensors().empty());
    QCOMPARE(ck.total_bytes(), ck.files().front()->data_bytes());  // every stored byte is classified
    std::uint64_t experts = 0;
    const std::uint64_t elem = s.arch == Arch::Mixtral ? 2 : 4;  // the mixtral fixture is bf16
    for (std::int64_t l = 0; l < s.num_layers; ++l)
      for (std::int64_t e = 0; e < s.num_experts; ++e) {
        QCOMPARE(ck.expert_bytes(l, e), std::uint64_t(3 * s.hidden_size * s.expert_intermediate) * elem);
        experts += ck.expert_bytes(l, e);
      }
    QCOMPARE(ck.non_expert_bytes() + experts, ck.total_bytes());
    // The shared expert of Qwen2-MoE is a non-expert weight: it runs for every token.
    for (const Weight& w : ck.weights())
      if (w.expected.name.find("shared_expert") != std::string::npos) QVERIFY(!w.expected.is_expert());
    QCOMPARE(parameter_count(s) * static_cast<std::int64_t>(elem), static_cast<std::int64_t>(ck.total_bytes()));
  }

  void familiesOfAllVariantsLoad() {
    for (const auto& f : families()) {
      Family family;
      for (const auto& v : variants()) family.add(v, fixture(f, v));
      QCOMPARE(family.size(), variants().size());
      QCOMPARE(family.spec().model_type(), std::string_view(f == "mixtral" ? "mixtral" : f == "olmoe" ? "olmoe" : "qwen2_moe"));
      QVERIFY(family.find("esft1"));
      QVERIFY(!family.find("ft9"));
    }
  }

  void mismatchedVariants() {
    Family family;
    family.add("base", fixture("mixtral", "base"));
    expect_mentions(error_of<MismatchError>([&] { family.add("other", fixture("olmoe", "base")); }),
                    {"variant 'other'", "does not match variant 'base'", "model_type: mixtral vs olmoe"});
    const fs::path dir = copy_checkpoint(fixture("mixtral", "ft1"), scratch("rope"));
    patch_config(dir, "rope_parameters", {{"rope_type", "default"}, {"rope_theta", 500000.0}});
    expect_mentions(error_of<MismatchError>([&] { family.add("ft1", dir); }), {dir.string(), "rope_theta"});
    QCOMPARE(family.size(), std::size_t(1));  // a refused variant leaves the family as it was
    expect_mentions(error_of<InvalidArgument>([&] { family.add("base", fixture("mixtral", "ft1")); }), {"'base'", "already"});
  }

  // As DeepSeek-V3 and Qwen3-30B-A3B-FP8 release them, and as GPTQ writes it: refused by the method,
  // naming the field and what to do (they failed as an unknown dtype or a missing tensor name).
  void quantizedReleasesRefused() {
    const fs::path dir = copy_checkpoint(fixture("mixtral", "base"), scratch("quantized"));
    patch_config(dir, "quantization_config",
                 nlohmann::json::parse(R"({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]})"));
    expect_mentions(error_of<UnsupportedError>([&] { Checkpoint c(dir); }),
                    {(dir / "config.json").string(), "quantization_config", "quant_method 'fp8'", "BF16 release"});
    patch_config(dir, "quantization_config", nlohmann::json::parse(R"({"bits": 4, "group_size": 128, "quant_method": "gptq"})"));
    expect_mentions(error_of<UnsupportedError>([&] { Checkpoint c(dir); }), {"quant_method 'gptq'"});
    patch_config(dir, "quantization_config", nullptr);  // null: not quantized
    Checkpoint unquantized(dir);
  }

  void missingTensor() {
    const fs::path dir = copy_checkpoint(fixture("qwen2_moe", "esft1"), scratch("missing"));
    rewrite_weights(dir, [](const TensorInfo& t) { return t.name != "model.layers.2.mlp.experts.5.up_proj.weight"; });
    expect_mentions(error_of<MissingError>([&] { Checkpoint c(dir); }),
                    {dir.string(), "model.layers.2.mlp.experts.5.up_proj.weight", "absent"});
  }

  void shapeDisagreesWithConfig() {
    const fs::path dir = copy_checkpoint(fixture("mixtral", "base"), scratch("shape"));
    patch_config(dir, "intermediate_size", 80);
    expect_mentions(error_of<MismatchError>([&] { Checkpoint c(dir); }),
                    {"model.safetensors", "experts.0.w1.weight", "[96, 64]", "[80, 64]"});
  }

  // Tensors the config leaves out are refused when they contradict it, not silently dropped.
  void weightsBeyondTheConfigRefused() {
    const fs::path fewer = copy_checkpoint(fixture("mixtral", "base"), scratch("fewer-layers"));
    const auto layers = nlohmann::json::parse(read_text(fewer / "config.json"))["num_hidden_layers"].get<int>();
    patch_config(fewer, "num_hidden_layers", layers - 1);
    expect_mentions(error_of<MismatchError>([&] { Checkpoint c(fewer); }),
                    {"model.safetensors", "model.layers." + std::to_string(layers - 1) + ".", "num_hidden_layers " + std::to_string(layers - 1)});
    const fs::path tied = copy_checkpoint(fixture("olmoe", "base"), scratch("tied"));
    patch_config(tied, "tie_word_embeddings", true);
    expect_mentions(error_of<MismatchError>([&] { Checkpoint c(tied); }), {"'lm_head.weight'", "tie_word_embeddings"});
    // A head that is a byte-for-byte copy of the embedding (some conversion tools save one) agrees.
    std::vector<std::byte> embedding;
    {
      const SafetensorsFile src(tied / "model.safetensors");
      const auto bytes = src.data(*src.find("model.embed_tokens.weight"));
      embedding.assign(bytes.begin(), bytes.end());
    }
    rewrite_weights(tied, [](const TensorInfo&) { return true; }, [&](const TensorInfo& t, std::vector<std::byte>& b) {
      if (t.name == "lm_head.weight") b = embedding;
    });
    QCOMPARE(Checkpoint(tied).unused_tensors(), std::vector<std::string>{"lm_head.weight"});
    // An extra that says nothing about the config (old checkpoints' rotary buffers) is kept out of
    // the model and listed, not refused.
    const fs::path extra = copy_checkpoint(fixture("olmoe", "base"), scratch("inv-freq"));
    {
      const SafetensorsFile src(extra / "model.safetensors");
      std::vector<TensorBytes> tensors;
      for (const TensorInfo& t : src.tensors()) tensors.push_back({t.name, t.dtype, t.shape, src.data(t)});
      const std::vector<float> inv_freq(8, 1.0f);
      tensors.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", DType::F32, {8}, std::as_bytes(std::span(inv_freq))});
      write_safetensors(extra / "model.tmp.safetensors", tensors);
    }
    fs::rename(extra / "model.tmp.safetensors", extra / "model.safetensors");
    const Checkpoint ok(extra);
    QCOMPARE(ok.unused_tensors(), std::vector<std::string>{"model.layers.0.self_attn.rotary_emb.inv_freq"});
  }

  // NaN or infinity in a weight is refused where the weights are first read, naming the tensor,
  // by the single-model path (Model::load) and the multi-variant one (HostStore) alike.
  void nonFiniteWeightsRefused() {
    const std::string expert = "model.layers.1.mlp.experts.3.down_proj.weight", embed = "model.embed_tokens.weight";
    auto poison = [&](const std::string& dir_name, const std::string& tensor, float value) {
      const fs::path dir = copy_checkpoint(fixture("olmoe", "base"), scratch(dir_name));
      rewrite_weights(dir, [](const TensorInfo&) { return true; }, [&](const TensorInfo& t, std::vector<std::byte>& bytes) {
        if (t.name == tensor) from_float(t.dtype, std::span(&value, 1), bytes.data() + 5 * dtype_size(t.dtype));
      });
      return dir;
    };
    const fs::path nan = poison("nan", expert, std::nanf(""));
    expect_mentions(error_of<FormatError>([&] { Model::load(Checkpoint(nan)); }), {"'" + expert + "'", "NaN or infinity", "element 5 of"});
    const fs::path inf = poison("inf", embed, -std::numeric_limits<float>::infinity());
    Family family;
    family.add("base", fixture("olmoe", "base"));
    family.add("inf", inf);
    expect_mentions(error_of<FormatError>([&] { HostStore store(family); }), {inf.string(), "'" + embed + "'", "element 5"});
    Model::load(Checkpoint(fixture("olmoe", "base")));  // finite weights load
  }

  // The scan behind it: the first NaN or infinity in every floating dtype, across block boundaries,
  // and never in integer data.
  void firstNonFiniteFindsTheFirst() {
    for (const DType d : {DType::BF16, DType::F16, DType::F32, DType::F64}) {
      for (const std::size_t at : {std::size_t(0), std::size_t(4095), std::size_t(4096), std::size_t(9999)}) {
        std::vector<float> values(10000, 1.5f);
        values[at] = std::numeric_limits<float>::infinity();
        values[9999] = std::nanf("");  // a later one does not hide the first
        std::vector<std::byte> bytes(values.size() * dtype_size(d));
        from_float(d, values, bytes.data());
        QCOMPARE(first_non_finite(d, bytes), std::optional<std::size_t>(at));
      }
      std::vector<std::byte> finite(100 * dtype_size(d));
      from_float(d, std::vector<float>(100, -3.0e38f / (d == DType::F16 ? 1e34f : 1.0f)), finite.data());
      QVERIFY(!first_non_finite(d, finite));
    }
    const std::vector<std::byte> ints(64, std::byte{0xFF});  // all-ones integers are numbers
    QVERIFY(!first_non_finite(DType::I32, ints));
  }

  void integerWeightsRefused() {
    const fs::path dir = copy_checkpoint(fixture("olmoe", "base"), scratch("int"));
    std::vector<TensorBytes> tensors;
    {
      const SafetensorsFile src(dir / "model.safetensors");
      std::vector<std::vector<std::byte>> keep;
      keep.reserve(src.tensors().size());  // spans below point into these buffers
      for (const TensorInfo& t : src.tensors()) {
        auto& b = keep.emplace_back(src.data(t).begin(), src.data(t).end());
        tensors.push_back({t.name, t.name == "model.norm.weight" ? DType::I32 : t.dtype, t.shape, b});
      }
      write_safetensors(dir / "model.safetensors", tensors);
    }
    expect_mentions(error_of<FormatError>([&] { Checkpoint c(dir); }), {"model.norm.weight", "I32", "floating point"});
  }

  void folderProblems() {
    expect_mentions(error_of<MissingError>([&] { Checkpoint c(scratch("nowhere")); }), {"nowhere", "does not exist"});
    std::ofstream(scratch("a-file")) << "not a checkpoint";
    expect_mentions(error_of<MissingError>([&] { Checkpoint c(scratch("a-file")); }), {"a-file", "is a file, not a folder"});
    const fs::path dir = copy_checkpoint(fixture("mixtral", "base"), scratch("noweights"));
    fs::remove(dir / "model.safetensors");
    expect_mentions(error_of<MissingError>([&] { Checkpoint c(dir); }), {"noweights", "neither model.safetensors"});
    // A symbolic link loop or a FIFO where the weights should be: named, not a filesystem exception
    // (exit 3) or a read that waits for a writer forever.
    fs::create_symlink("model.safetensors", dir / "model.safetensors");
    expect_mentions(error_of<IoError>([&] { Checkpoint c(dir); }), {(dir / "model.safetensors").string(), "loop of symbolic links"});
    fs::remove(dir / "model.safetensors");
    QCOMPARE(::mkfifo((dir / "model.safetensors").c_str(), 0600), 0);
    expect_mentions(error_of<IoError>([&] { Checkpoint c(dir); }), {"model.safetensors", "not a regular file"});
    fs::remove(dir / "model.safetensors");
    fs::create_symlink("model.safetensors.index.json", dir / "model.safetensors.index.json");
    expect_mentions(error_of<IoError>([&] { Checkpoint c(dir); }), {"model.safetensors.index.json", "loop of symbolic links"});
    fs::remove(dir / "model.safetensors.index.json");
    fs::remove(dir / "config.json");
    expect_mentions(error_of<MissingError>([&] { Checkpoint c(dir); }), {"config.json"});
    // A family folder holding a symbolic link loop: the loop is named, not a filesystem exception.
    const fs::path fam = scratch("loop-family");
    fs::create_directories(fam);
    copy_checkpoint(fixture("olmoe", "base"), fam / "base");
    fs::create_directory_symlink("loop", fam / "loop");
    expect_mentions(error_of<IoError>([&] { discover_variants({fam}); }), {(fam / "loop").string(), "loop of symbolic links"});
    fs::remove(fam / "loop");
    fs::create_directory_symlink("../base", fam / "base" / "self");  // a loop inside a variant is not looked into
    QCOMPARE(discover_variants({fam}).size(), std::size_t(1));
  }

  void syntheticCheckpointLoads() {
    ModelSpec s = mixtral_like_spec(500, 128, 192, 2, 4);
    const fs::path dir = scratch("synthetic");
    write_synthetic_checkpoint(dir, s, DType::F16, 3);
    const Checkpoint ck(dir);
    QVERIFY(!first_difference(s, ck.spec()));
    QCOMPARE(ck.weights().front().dtype, DType::F16);
    QCOMPARE(static_cast<std::int64_t>(ck.total_bytes()), parameter_count(s) * 2);
    // Active: everything but the experts a token is not routed to (top-2 of 4 in each of 2 layers).
    QCOMPARE(parameter_count(s) - active_parameter_count(s), std::int64_t(2 * 2 * 3 * 128 * 192));
  }

  // DeepSeek's ESFT adapter folders: opened over a base given beside them (they name none), their
  // released "layers.N.…" names read as the model's, and refused, naming the tensor or field, when
  // they hold more or less than expert_cfg.json says they tuned or sit on another model.
  void deepseekAdapterFolders() {
    const ModelSpec v2 = parse_model_spec(deepseek_v2_config(), "config.json");
    const fs::path base = scratch("ds-base");
    write_synthetic_checkpoint(base, v2, DType::F32, 3);
    const fs::path adapter = make_deepseek_adapter(base, scratch("ds-adapter"), {.experts = {{1, {6, 2}}, {2, {0}}}});
    expect_mentions(error_of<MissingError>([&] { Checkpoint ck(adapter); }), {"expert_cfg.json", "base_model", "--variants BASE ADAPTER"});
    const Checkpoint ck(adapter, base);
    QVERIFY(ck.is_adapter());
    QCOMPARE(ck.adapter_experts(), (std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 2}, {1, 6}, {2, 0}}));
    QVERIFY(ck.unused_tensors().empty());
    QCOMPARE(ck.weight("model.layers.1.mlp.experts.6.gate_proj.weight").file->path().parent_path(), adapter);
    QCOMPARE(ck.weight("model.layers.1.mlp.experts.5.gate_proj.weight").file->path().parent_path(), base);

    // An expert it does not list, stored anyway.
    const fs::path extra = make_deepseek_adapter(base, scratch("ds-extra"), {.experts = {{1, {6}}, {2, {0}}}});
    std::ofstream(extra / "expert_cfg.json") << R"({"experts": {"1": [], "2": [0]}, "shared_experts": false, "non_expert_modules": false})";
    expect_mentions(error_of<FormatError>([&] { Checkpoint c(extra, base); }), {"layers.1.mlp.experts.6.", "is not one of the tensors"});
    // One it lists and does not store; shared experts it says it tuned but did not store.
    std::ofstream(extra / "expert_cfg.json") << R"({"experts": {"1": [6, 7], "2": [0]}, "shared_experts": false, "non_expert_modules": false})";
    expect_mentions(error_of<MissingError>([&] { Checkpoint c(extra, base); }), {"model.layers.1.mlp.experts.7", "absent from the adapter"});
    std::ofstream(extra / "expert_cfg.json") << R"({"experts": {"1": [6], "2": [0]}, "shared_experts": true, "non_expert_modules": false})";
    expect_mentions(error_of<MissingError>([&] { Checkpoint c(extra, base); }), {"shared_experts", "absent from the adapter"});
    std::ofstream(extra / "expert_cfg.json") << R"({"experts": {"1": [6], "2": [0]}, "shared_experts": "yes"})";
    expect_mentions(error_of<FormatError>([&] { Checkpoint c(extra, base); }), {"shared_experts", "true or false"});
    // A dense layer's empty key is nothing tuned; a tuned expert there means another model.
    std::ofstream(extra / "expert_cfg.json") << R"({"experts": {"0": [], "1": [6], "2": [0]}})";
    QVERIFY(Checkpoint(extra, base).is_adapter());
    std::ofstream(extra / "expert_cfg.json") << R"({"experts": {"0": [1], "1": [6], "2": [0]}})";
    expect_mentions(error_of<FormatError>([&] { Checkpoint c(extra, base); }), {"experts.0", "not an MoE layer"});
    // Over a base of another model (V3's config).
    const fs::path other = scratch("ds-v3-base");
    write_synthetic_checkpoint(other, parse_model_spec(deepseek_v3_config(), "config.json"), DType::F32, 3);
    expect_mentions(error_of<MismatchError>([&] { Checkpoint c(adapter, other); }), {"config.json", "differs from the base model's"});
    // In a family: served over the full checkpoint listed last before it; none before it, refused.
    Family family;
    open_family(family, {base, adapter});
    QCOMPARE(family.variants()[1].checkpoint->base_dir(), fs::absolute(base));
    Family alone;
    expect_mentions(error_of<MissingError>([&] { open_family(alone, {adapter, base}); }), {"base_model"});
  }
};

QTEST_GUILESS_MAIN(TestCheckpoint)
#include "tst_checkpoint.moc"
