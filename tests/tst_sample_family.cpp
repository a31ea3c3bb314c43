// The sample family in resources/ (written by `mosaic-cli forge --recipe
// sample_configs/forge-sample.json`): small enough for git, opens as one family with its ESFT
// adapters, and each variant is measurably better than the base on its own domain.
#include <QTest>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <sstream>

#include "model/family.h"
#include "model/tokenizer.h"
#include "runtime/forward.h"
#include "runtime/perplexity.h"
#include "runtime/threads.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

namespace {

const fs::path kFamily = fs::path(MOSAIC_RESOURCES) / "sample-family";
const std::vector<std::string> kDomains{"bible", "fortunes", "jargon", "c-headers"};

double own_domain_perplexity(const fs::path& dir, const std::vector<std::int64_t>& ids) {
  const Checkpoint ck(dir);
  const auto model = Model::load(ck);
  return perplexity(ids, 128, 24, [&](const std::vector<std::span<const std::int64_t>>& windows) {
           std::vector<Logits> out;
           for (const auto& w : windows) {
             KvCache cache(model->spec(), 1, static_cast<std::int64_t>(w.size()));
             out.push_back(forward(*model, cache, w, LogitsFor::AllPositions));
           }
           return out;
         }).perplexity;
}

}  // namespace

class SampleFamilyTest : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  void initTestCase() {
    if (!fs::exists(kFamily / "forge.json")) QFAIL("resources/sample-family is missing: run mosaic-cli forge --recipe sample_configs/forge-sample.json");
    configure_threads(0);
  }

  void fits_in_git_and_opens_as_one_family() {
    std::uintmax_t bytes = 0;
    for (const auto& e : fs::recursive_directory_iterator(kFamily))
      if (e.is_regular_file()) bytes += e.file_size();
    QVERIFY2(bytes <= 40ull * 1000 * 1000, (std::to_string(bytes) + " bytes").c_str());
    Family family;
    family.add("base", kFamily / "base");
    for (const auto& d : kDomains) {
      family.add(d, kFamily / d);
      const Variant& esft = family.add("esft-" + d, kFamily / ("esft-" + d));
      QVERIFY(!esft.checkpoint->adapter_experts().empty());
      // An adapter tunes a few experts, not all of them.
      QVERIFY(static_cast<std::int64_t>(esft.checkpoint->adapter_experts().size()) < family.spec().num_sparse_layers() * family.spec().num_experts / 2);
    }
    QCOMPARE(family.size(), std::size_t(9));
  }

  void tokenizer_round_trips_every_domain() {
    const Tokenizer t = Tokenizer::load(kFamily / "base" / "tokenizer.json");
    for (const auto& d : kDomains) {
      const std::string text = read_text(kFamily / "heldout" / (d + ".txt"));
      QVERIFY(text.size() > 10'000);
      const auto ids = t.encode(text, false);
      QCOMPARE(t.decode(ids), text);
      QVERIFY(ids.size() * 3 / 2 < text.size());  // merges compress every domain
    }
  }

  void each_variant_beats_the_base_on_its_own_domain() {
    MOSAIC_RELEASE_BUILD_ONLY("tst_cli's forgeGenerateEvalAndQuality evaluates with the same forward passes (on a forged family); here they are perplexities over four domains");
    const Tokenizer t = Tokenizer::load(kFamily / "base" / "tokenizer.json");
    for (const auto& d : kDomains) {
      const auto ids = t.encode(read_text(kFamily / "heldout" / (d + ".txt")), false);
      const double base = own_domain_perplexity(kFamily / "base", ids);
      const double tuned = own_domain_perplexity(kFamily / d, ids);
      const double esft = own_domain_perplexity(kFamily / ("esft-" + d), ids);
      qInfo("%s: base %.2f, fine-tuned %.2f, ESFT %.2f", d.c_str(), base, tuned, esft);
      QVERIFY2(tuned < 0.9 * base, d.c_str());
      QVERIFY2(esft < base, d.c_str());
    }
  }
};

QTEST_APPLESS_MAIN(SampleFamilyTest)
#include "tst_sample_family.moc"
