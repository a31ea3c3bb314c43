// The safetensors reader and writer: real fixture files, every dtype, sharded checkpoints, and each
// way a file can be malformed.
#include <QTemporaryDir>
#include <QTest>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/checkpoint.h"
#include "model/safetensors.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

class TestSafetensors : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  fs::path scratch(const char* name) const { return fs::path(tmp_.path().toStdString()) / name; }

  // A copy of mixtral/base's weights with its header replaced by `edit(header)`.
  fs::path with_header(const char* name, const std::function<void(nlohmann::json&)>& edit) const {
    const SafetensorsFile src(fixture("mixtral", "base") / "model.safetensors");
    nlohmann::json h = nlohmann::json::object();
    for (const TensorInfo& t : src.tensors())
      h[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
    edit(h);
    const fs::path p = scratch(name);
    write_raw_safetensors(p, h.dump(), src.data_bytes());
    return p;
  }

 private Q_SLOTS:
  void initTestCase() { QVERIFY(tmp_.isValid()); }

  void readsFixtureZeroCopy() {
    const fs::path path = fixture("mixtral", "base") / "model.safetensors";
    const SafetensorsFile f(path);
    QCOMPARE(f.metadata().at("format"), std::string("pt"));
    // embed, norm, lm_head + per layer: 2 norms, 4 attention, router, 8 experts × 3.
    QCOMPARE(f.tensors().size(), std::size_t(3 + 3 * (2 + 4 + 1 + 24)));
    const TensorInfo* embed = f.find("model.embed_tokens.weight");
    QVERIFY(embed);
    QCOMPARE(embed->dtype, DType::BF16);
    QCOMPARE(embed->shape, (std::vector<std::int64_t>{320, 64}));
    QCOMPARE(f.data(*embed).size(), std::size_t(320 * 64 * 2));
    QVERIFY(!f.find("model.embed_tokens.bias"));
    // Zero-copy: the span points into the file's bytes, at the offset the header gives.
    std::ifstream in(path, std::ios::binary);
    std::uint64_t n = 0;
    in.read(reinterpret_cast<char*>(&n), 8);
    in.seekg(static_cast<std::streamoff>(8 + n + embed->begin));
    std::vector<char> first(16);
    in.read(first.data(), 16);
    QVERIFY(std::memcmp(first.data(), f.data(*embed).data(), 16) == 0);
  }

  void roundTripsEveryDtype() {
    const std::vector<DType> all{DType::BF16, DType::F16, DType::F32, DType::F64, DType::I64,
                                 DType::I32,  DType::I16, DType::I8,  DType::U8,  DType::BOOL};
    std::vector<std::vector<std::byte>> bufs;
    std::vector<TensorBytes> tensors;
    for (std::size_t i = 0; i < all.size(); ++i) {
      auto& b = bufs.emplace_back(3 * 5 * dtype_size(all[i]));
      for (std::size_t j = 0; j < b.size(); ++j) b[j] = std::byte((i * 31 + j * 7) & 0xff);
      tensors.push_back({"t." + std::string(dtype_name(all[i])), all[i], {3, 5}, b});
    }
    const auto empty = std::vector<std::byte>{};
    tensors.push_back({"scalar_empty", DType::F32, {0, 4}, empty});
    const fs::path p = scratch("all.safetensors");
    write_safetensors(p, tensors, {{"note", "every dtype"}});

    const SafetensorsFile f(p);
    QCOMPARE(f.metadata().at("note"), std::string("every dtype"));
    for (std::size_t i = 0; i < all.size(); ++i) {
      const TensorInfo* t = f.find("t." + std::string(dtype_name(all[i])));
      QVERIFY(t);
      QCOMPARE(t->dtype, all[i]);
      QCOMPARE(t->shape, (std::vector<std::int64_t>{3, 5}));
      QVERIFY(std::memcmp(f.data(*t).data(), bufs[i].data(), bufs[i].size()) == 0);
    }
    QCOMPARE(f.find("scalar_empty")->nbytes(), std::uint64_t(0));
    std::ifstream in(p, std::ios::binary);
    std::uint64_t n = 0;
    in.read(reinterpret_cast<char*>(&n), 8);
    QCOMPARE(n % 8, std::uint64_t(0));  // data section stays 8-byte aligned
  }

  void writerRejectsWrongSizeAndLeavesNothing() {
    const fs::path p = scratch("bad-write.safetensors");
    const std::vector<std::byte> three(3);
    const TensorBytes t{"x", DType::F32, {1}, three};
    const auto msg = error_of<InvalidArgument>([&] { write_safetensors(p, std::span(&t, 1)); });
    expect_mentions(msg, {"tensor 'x'", "3 bytes"});
    QVERIFY(!fs::exists(p));
    for (const auto& e : fs::directory_iterator(scratch("")))
      QVERIFY2(e.path().filename().string().find(".tmp-") == std::string::npos, "a temporary file was left behind");
  }

  void writerReportsUnwritableFolder() {
    const std::vector<std::byte> four(4);
    const TensorBytes t{"x", DType::F32, {1}, four};
    const auto msg = error_of<IoError>([&] { write_safetensors(scratch("no/such/dir/x.safetensors"), std::span(&t, 1)); });
    expect_mentions(msg, {"no/such/dir/x.safetensors", "cannot create"});
  }

  void shardedCheckpointMatchesSingleFile() {
    const fs::path dir = scratch("sharded");
    fs::create_directories(dir);
    fs::copy_file(fixture("mixtral", "ft1") / "config.json", dir / "config.json");
    const SafetensorsFile src(fixture("mixtral", "ft1") / "model.safetensors");
    std::vector<TensorBytes> a, b;
    nlohmann::json map;
    for (const TensorInfo& t : src.tensors()) {
      const bool first = t.name.find("layers.0.") != std::string::npos || t.name.find("embed") != std::string::npos;
      (first ? a : b).push_back({t.name, t.dtype, t.shape, src.data(t)});
      map[t.name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    }
    write_safetensors(dir / "model-00001-of-00002.safetensors", a);
    write_safetensors(dir / "model-00002-of-00002.safetensors", b);
    std::ofstream(dir / "model.safetensors.index.json") << nlohmann::json{{"metadata", {}}, {"weight_map", map}}.dump();

    const Checkpoint sharded(dir), single(fixture("mixtral", "ft1"));
    QCOMPARE(sharded.files().size(), std::size_t(2));
    QCOMPARE(sharded.weights().size(), single.weights().size());
    for (std::size_t i = 0; i < single.weights().size(); ++i) {
      const Weight& x = sharded.weights()[i];
      const Weight& y = single.weights()[i];
      QCOMPARE(x.expected.name, y.expected.name);
      QVERIFY(x.data().size() == y.data().size() && std::memcmp(x.data().data(), y.data().data(), y.data().size()) == 0);
    }

    // A shard the index names but the folder lacks.
    fs::rename(dir / "model-00002-of-00002.safetensors", dir / "moved.safetensors");
    expect_mentions(error_of<MissingError>([&] { Checkpoint c(dir); }), {"model-00002-of-00002.safetensors", "absent"});
    // A tensor the index places in a shard that does not hold it.
    fs::rename(dir / "moved.safetensors", dir / "model-00002-of-00002.safetensors");
    map["model.norm.weight"] = "model-00001-of-00002.safetensors";
    std::ofstream(dir / "model.safetensors.index.json") << nlohmann::json{{"weight_map", map}}.dump();
    expect_mentions(error_of<MissingError>([&] { Checkpoint c(dir); }), {"model.norm.weight", "model-00001-of-00002"});
  }

  // ---- malformed files: each a FormatError naming the file and, where there is one, the tensor ----

  void truncatedFile() {
    const fs::path p = scratch("truncated.safetensors");
    fs::copy_file(fixture("mixtral", "base") / "model.safetensors", p);
    fs::permissions(p, fs::perms::owner_write, fs::perm_options::add);
    fs::resize_file(p, fs::file_size(p) - 100);
    const auto msg = error_of<FormatError>([&] { SafetensorsFile f(p); });
    // The tensor stored last (at the highest offset) is the one cut short.
    expect_mentions(msg, {p.string(), "tensor 'model.norm.weight'", "truncated"});
  }

  void offsetPastTheEnd() {
    const auto p = with_header("past-end.safetensors", [](nlohmann::json& h) {
      h["model.layers.0.input_layernorm.weight"]["data_offsets"] = {2000000, 2000128};
    });
    expect_mentions(error_of<FormatError>([&] { SafetensorsFile f(p); }),
                    {p.string(), "model.layers.0.input_layernorm.weight", "past its end"});
  }

  void overlappingTensors() {
    const auto p = with_header("overlap.safetensors", [](nlohmann::json& h) {
      // Move one norm onto the bytes of the other, keeping its length.
      h["model.layers.0.post_attention_layernorm.weight"]["data_offsets"] =
          h["model.layers.0.input_layernorm.weight"]["data_offsets"];
    });
    expect_mentions(error_of<FormatError>([&] { SafetensorsFile f(p); }), {p.string(), "overlaps", "layernorm.weight"});
  }

  void gapBetweenTensors() {
    const auto p = with_header("gap.safetensors", [](nlohmann::json& h) { h.erase("model.layers.1.input_layernorm.weight"); });
    expect_mentions(error_of<FormatError>([&] { SafetensorsFile f(p); }), {p.string(), "gap"});
  }

  void unknownDtype() {
    const auto p = with_header("dtype.safetensors", [](nlohmann::json& h) { h["model.norm.weight"]["dtype"] = "Q4_K"; });
    expect_mentions(error_of<FormatError>([&] { SafetensorsFile f(p); }),
                    {p.string(), "tensor 'model.norm.weight'", "unknown dtype 'Q4_K'", "BF16"});
  }

  // DeepSeek-V3's and Kimi-K2's releases, Qwen3's -FP8: said to be quantized, with what to do.
  void quantizedDtype() {
    for (const char* dtype : {"F8_E4M3", "F8_E5M2", "F4"}) {
      const auto p = with_header("fp8.safetensors", [&](nlohmann::json& h) { h["model.norm.weight"]["dtype"] = dtype; });
      expect_mentions(error_of<UnsupportedError>([&] { SafetensorsFile f(p); }),
                      {p.string(), "tensor 'model.norm.weight'", std::string("is ") + dtype + ", a quantized format", "BF16 release"});
    }
  }

  void byteLengthDisagreesWithShape() {
    const auto p = with_header("shape.safetensors", [](nlohmann::json& h) { h["model.norm.weight"]["shape"] = {65}; });
    expect_mentions(error_of<FormatError>([&] { SafetensorsFile f(p); }),
                    {p.string(), "tensor 'model.norm.weight'", "holds 128 bytes", "130"});
  }

  // A dimension past int64 (with a zero beside it, so the byte count still agrees) is refused
  // rather than read back as a negative size.
  void dimensionPastInt64() {
    const fs::path p = scratch("huge-dim.safetensors");
    write_raw_safetensors(p, R"({"a": {"dtype": "F32", "shape": [0, 18446744073709551615], "data_offsets": [0, 0]}})", 0);
    expect_mentions(error_of<FormatError>([&] { SafetensorsFile f(p); }), {p.string(), "tensor 'a'", "past 2^63"});
    // Products past int64 are refused even where a zero makes the count 0, or the byte count wraps.
    write_raw_safetensors(p, R"({"a": {"dtype": "F32", "shape": [4611686018427387904, 4, 0], "data_offsets": [0, 0]}})", 0);
    expect_mentions(error_of<FormatError>([&] { SafetensorsFile f(p); }), {"tensor 'a'", "overflows"});
    write_raw_safetensors(p, R"({"a": {"dtype": "F32", "shape": [2305843009213693952, 4], "data_offsets": [0, 0]}})", 0);
    expect_mentions(error_of<FormatError>([&] { SafetensorsFile f(p); }), {"tensor 'a'", "overflows"});
  }

  void headerNotJson() {
    const fs::path p = scratch("notjson.safetensors");
    write_raw_safetensors(p, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], ", 4);
    expect_mentions(error_of<FormatError>([&] { SafetensorsFile f(p); }), {p.string(), "not valid JSON"});
  }

  // A key repeated in the header: parsers disagree on which copy wins, so it is refused.
  void duplicateKeys() {
    const fs::path p = scratch("dup.safetensors");
    write_raw_safetensors(p, R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4);
    expect_mentions(error_of<FormatError>([&] { SafetensorsFile f(p); }), {p.string(), "'a'", "twice"});
  }

  // nlohmann would skip a byte-order mark that safetensors' own reader refuses.
  void byteOrderMark() {
    const fs::path p = scratch("bom.safetensors");
    write_raw_safetensors(p, "\xEF\xBB\xBF{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4);
    expect_mentions(error_of<FormatError>([&] { SafetensorsFile f(p); }), {p.string(), "byte-order mark"});
  }

  void headerLengthLargerThanFile() {
    const fs::path p = scratch("longheader.safetensors");
    write_raw_safetensors(p, "{}", 0, /*declared_header_length=*/4096);
    expect_mentions(error_of<FormatError>([&] { SafetensorsFile f(p); }), {p.string(), "header length 4096", "larger than the file"});
    write_raw_safetensors(p, "{}", 0, /*declared_header_length=*/SafetensorsFile::kMaxHeaderBytes + 1);
    expect_mentions(error_of<FormatError>([&] { SafetensorsFile f(p); }), {p.string(), "exceeds the format's limit"});
  }

  void tooShortAndMissing() {
    const fs::path p = scratch("short.safetensors");
    std::ofstream(p) << "abc";
    expect_mentions(error_of<FormatError>([&] { SafetensorsFile f(p); }), {p.string(), "too short"});
    expect_mentions(error_of<IoError>([&] { SafetensorsFile f(scratch("absent.safetensors")); }), {"absent.safetensors", "cannot open"});
  }
};

QTEST_GUILESS_MAIN(TestSafetensors)
#include "tst_safetensors.moc"
