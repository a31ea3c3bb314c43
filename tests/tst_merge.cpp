// Merge baselines: the averaged and the consolidated checkpoints load with the ordinary loader, hold
// exactly the weights composed here by hand from the variants' files, and give the same logits.
#include <QTemporaryDir>
#include <QTest>

#include <bit>
#include <cstring>
#include <fstream>
#include <sstream>

#include "analysis/family_analysis.h"
#include "analysis/merge.h"
#include "common/error.h"
#include "runtime/forward.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

namespace {

std::vector<float> logits_of(const fs::path& dir) {
  const Checkpoint ck(dir);
  const auto model = Model::load(ck);
  const std::vector<std::int64_t> ids{1, 17, 42, 99, 5, 230, 7, 64};
  KvCache cache(model->spec(), 1, static_cast<std::int64_t>(ids.size()));
  return forward(*model, cache, ids, LogitsFor::AllPositions).values;
}

std::string file_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Element k of a stored F32 or BF16 tensor, and back; written here rather than borrowed from core.
float element(const std::byte* data, DType dtype, std::size_t k) {
  if (dtype == DType::F32) {
    float f;
    std::memcpy(&f, data + 4 * k, 4);
    return f;
  }
  std::uint16_t h;
  std::memcpy(&h, data + 2 * k, 2);
  return std::bit_cast<float>(std::uint32_t{h} << 16);
}
void store(std::byte* data, DType dtype, std::size_t k, float f) {
  if (dtype == DType::F32) return void(std::memcpy(data + 4 * k, &f, 4));
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const auto h = static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // nearest even
  std::memcpy(data + 2 * k, &h, 2);
}

// Every weight of `a` and `b` byte for byte; the first difference otherwise.
std::string first_weight_difference(const fs::path& a, const fs::path& b) {
  const Checkpoint x(a), y(b);
  for (std::size_t i = 0; i < x.weights().size(); ++i) {
    const auto p = x.weights()[i].data(), q = y.weights()[i].data();
    if (p.size() != q.size() || std::memcmp(p.data(), q.data(), p.size()) != 0) return x.weights()[i].expected.name;
  }
  return {};
}

}  // namespace

class TestMerge : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  fs::path scratch(const std::string& name) const { return fs::path(tmp_.path().toStdString()) / name; }

 private Q_SLOTS:
  void initTestCase() { QVERIFY(tmp_.isValid()); }

  void averagingIsTheMeanOfEveryParameter_data() {
    QTest::addColumn<QString>("family");
    QTest::newRow("mixtral (bf16)") << QStringLiteral("mixtral");
    QTest::newRow("qwen2_moe (fp32)") << QStringLiteral("qwen2_moe");
  }
  void averagingIsTheMeanOfEveryParameter() {
    QFETCH(QString, family);
    const std::string fam = family.toStdString();
    const std::vector<std::string> names{"base", "ft1", "ft3"};
    Family f;
    for (const auto& v : names) f.add(v, fixture(fam, v));
    const fs::path out = scratch(fam + "-avg");
    write_averaged(f, out);

    // By hand: base's file with every element replaced by the mean of the three, in double.
    std::vector<SafetensorsFile> files;
    for (const auto& v : names) files.emplace_back(fixture(fam, v) / "model.safetensors");
    const fs::path composed = copy_checkpoint(fixture(fam, "base"), scratch(fam + "-avg-by-hand"));
    rewrite_weights(composed, [](const TensorInfo&) { return true; }, [&](const TensorInfo& t, std::vector<std::byte>& b) {
      for (std::size_t k = 0; k < static_cast<std::size_t>(t.numel()); ++k) {
        double sum = 0;
        for (const auto& file : files) sum += element(file.data(*file.find(t.name)).data(), file.find(t.name)->dtype, k);
        store(b.data(), t.dtype, k, static_cast<float>(sum / 3.0));
      }
    });
    QCOMPARE(first_weight_difference(out, composed), std::string());
    QCOMPARE(file_text(out / "config.json"), file_text(fixture(fam, "base") / "config.json"));
    const auto merged = logits_of(out);
    QCOMPARE(merged, logits_of(composed));
    QVERIFY(relative_error(merged, logits_of(fixture(fam, "base"))) > 1e-4);  // it is not just base
  }

  void consolidatedIsTargetPlusResidentCopies() {
    Family f;
    for (const char* v : {"base", "ft1", "ft2", "ft3"}) f.add(v, fixture("olmoe", v));
    const auto a = analyze_family(f);
    const Layout layout = make_layout(f, a->sha256, plan_consolidation(a->distances, 11, Policy::RoundRobin));
    QCOMPARE(layout.plan.resident_counts(), (std::vector<std::int64_t>{3, 3, 3, 2}));

    const fs::path out = scratch("olmoe-consolidated-ft2");
    write_consolidated(f, layout, "ft2", out);

    // By hand: ft2's file, with the holder's bytes at each resident position.
    const fs::path composed = copy_checkpoint(fixture("olmoe", "ft2"), scratch("olmoe-consolidated-by-hand"));
    std::vector<SafetensorsFile> files;
    for (const char* v : {"base", "ft1", "ft2", "ft3"}) files.emplace_back(fixture("olmoe", v) / "model.safetensors");
    int replaced = 0;
    rewrite_weights(composed, [](const TensorInfo&) { return true; }, [&](const TensorInfo& t, std::vector<std::byte>& b) {
      for (std::int64_t l = 0; l < 3; ++l)
        for (std::int64_t e = 0; e < 8; ++e) {
          const std::string prefix = "model.layers." + std::to_string(l) + ".mlp.experts." + std::to_string(e) + ".";
          const int holder = layout.plan.resident(l, e);
          if (holder < 0 || t.name.rfind(prefix, 0) != 0) continue;
          const auto src = files[static_cast<std::size_t>(holder)].data(*files[static_cast<std::size_t>(holder)].find(t.name));
          std::memcpy(b.data(), src.data(), b.size());
          replaced += holder != 2;
        }
    });
    QCOMPARE(replaced, 3 * 8);  // the 8 positions held by other variants × gate, up, down
    QCOMPARE(first_weight_difference(out, composed), std::string());
    QCOMPARE(logits_of(out), logits_of(composed));
    // Non-expert weights are the target's own: its embedding, not base's.
    const Checkpoint merged(out), base(fixture("olmoe", "base")), target(fixture("olmoe", "ft2"));
    const auto embed = merged.weight("model.embed_tokens.weight").data();
    QVERIFY(std::memcmp(embed.data(), target.weight("model.embed_tokens.weight").data().data(), embed.size()) == 0);
    QVERIFY(std::memcmp(embed.data(), base.weight("model.embed_tokens.weight").data().data(), embed.size()) != 0);
  }

  void refusesToOverwriteAndLeavesNothingOnFailure() {
    Family f;
    for (const char* v : {"base", "ft1"}) f.add(v, fixture("olmoe", v));
    const fs::path busy = scratch("busy");
    fs::create_directories(busy);
    std::ofstream(busy / "keep.txt") << "mine";
    expect_mentions(error_of<InvalidArgument>([&] { write_averaged(f, busy); }), {"busy", "not an empty folder"});
    QCOMPARE(file_text(busy / "keep.txt"), std::string("mine"));

    Layout layout;
    layout.variants = {{"base", "", ""}, {"ft1", "", ""}};
    layout.plan = plan_consolidation(*expert_distances(f), 4, Policy::RoundRobin);
    expect_mentions(error_of<InvalidArgument>([&] { write_consolidated(f, layout, "ft7", scratch("never")); }),
                    {"target 'ft7'", "not one of the variants"});
    // A layout naming a variant that was not given fails mid-write: no output, no temporary.
    layout.variants[1].name = "ft9";
    expect_mentions(error_of<MismatchError>([&] { write_consolidated(f, layout, "base", scratch("half")); }), {"'ft9'"});
    for (const auto& e : fs::directory_iterator(scratch("")))
      QVERIFY2(e.path().filename().string().find("half") == std::string::npos, e.path().c_str());

    // An empty folder is fine.
    fs::create_directories(scratch("empty"));
    write_averaged(f, scratch("empty"));
    QVERIFY(fs::exists(scratch("empty") / "model.safetensors"));
  }
};

QTEST_GUILESS_MAIN(TestMerge)
#include "tst_merge.moc"
