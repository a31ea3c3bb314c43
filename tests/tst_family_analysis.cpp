// Content hashes and the analysis cache: SHA-256 against published test vectors and sha256sum's
// listing, the hash memo, and a distance cache that is hit for unchanged checkpoints (no
// recomputation), missed for changed ones, and never trusted when damaged.
#include <QTemporaryDir>
#include <QTest>

#include <cstdio>
#include <fstream>

#include "analysis/family_analysis.h"
#include "common/error.h"
#include "common/sha256.h"
#include "model/content_hash.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

namespace {
// Flips one element of the first tensor whose name contains `part`.
void change_weight(const fs::path& dir, const std::string& part) {
  bool done = false;
  rewrite_weights(dir, [](const TensorInfo&) { return true; }, [&](const TensorInfo& t, std::vector<std::byte>& b) {
    if (done || t.name.find(part) == std::string::npos) return;
    b[0] ^= std::byte{0x40};
    done = true;
  });
  QVERIFY(done);
}
}  // namespace

class TestFamilyAnalysis : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  fs::path scratch(const std::string& name) const { return fs::path(tmp_.path().toStdString()) / name; }

 private Q_SLOTS:
  void initTestCase() { QVERIFY(tmp_.isValid()); }

  void sha256MatchesPublishedVectors() {
    QCOMPARE(sha256_hex(""), std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    QCOMPARE(sha256_hex("abc"), std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    const fs::path f = scratch("million-a");
    std::ofstream(f) << std::string(1000000, 'a');  // the FIPS 180-2 "one million a" vector
    QCOMPARE(sha256_file(f), std::string("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
    expect_mentions(error_of<IoError>([&] { sha256_file(scratch("absent")); }), {"absent", "cannot be opened"});
  }

  // The checkpoint hash is the digest of a `sha256sum` listing of its files, in name order.
  void checkpointHashIsTheListingDigest() {
    const fs::path dir = fixture("olmoe", "ft2");
    const Checkpoint ck(dir);
    const std::string listing = sha256_file(dir / "config.json") + "  config.json\n" +
                                sha256_file(dir / "model.safetensors") + "  model.safetensors\n";
    QCOMPARE(checkpoint_sha256(ck), sha256_hex(listing));
    // Content, not location: a copy elsewhere has the same hash; one changed bit gives another.
    const fs::path copy = copy_checkpoint(dir, scratch("ft2-copy"));
    QCOMPARE(checkpoint_sha256(Checkpoint(copy)), checkpoint_sha256(ck));
    change_weight(copy, "experts.3.up_proj");
    QVERIFY(checkpoint_sha256(Checkpoint(copy)) != checkpoint_sha256(ck));
  }

  void memoSkipsUnchangedFiles() {
    const fs::path copy = copy_checkpoint(fixture("olmoe", "ft1"), scratch("memo-ck"));
    const fs::path store = scratch("memo/file-hashes.json");
    std::string first;
    {
      FileHashMemo memo(store);
      first = checkpoint_sha256(Checkpoint(copy), &memo);
      QCOMPARE(memo.computed(), std::size_t(2));
      memo.save();
    }
    {
      FileHashMemo memo(store);
      QCOMPARE(checkpoint_sha256(Checkpoint(copy), &memo), first);
      QCOMPARE(memo.computed(), std::size_t(0));  // both files remembered
    }
    change_weight(copy, "experts.0.down_proj");  // rewritten: new size or time
    FileHashMemo memo(store);
    QVERIFY(checkpoint_sha256(Checkpoint(copy), &memo) != first);
    QCOMPARE(memo.computed(), std::size_t(1));    // only the weights file again
    std::ofstream(store) << "{ not json";
    FileHashMemo damaged(store);                   // a damaged memo is an empty one
    QCOMPARE(checkpoint_sha256(Checkpoint(copy), &damaged), checkpoint_sha256(Checkpoint(copy)));
  }

  void cacheIsHitForUnchangedAndMissedForChanged() {
    const fs::path cache = scratch("cache");
    const fs::path ft1 = copy_checkpoint(fixture("mixtral", "ft1"), scratch("mixtral-ft1"));
    auto open = [&] {
      auto f = std::make_unique<Family>();
      f->add("base", fixture("mixtral", "base"));
      f->add("ft1", ft1);
      f->add("ft2", fixture("mixtral", "ft2"));
      return f;
    };
    int calls = 0;
    const AnalysisOptions options{cache, 2, [&](std::int64_t, std::int64_t) { ++calls; return true; }};
    const auto fresh = analyze_family(*open(), options);
    QVERIFY(fresh && !fresh->from_cache);
    QCOMPARE(calls, 24);  // 3 layers × 8 experts
    const auto again = analyze_family(*open(), options);
    QVERIFY(again && again->from_cache);
    QCOMPARE(calls, 24);  // nothing recomputed
    QCOMPARE(again->sha256, fresh->sha256);
    QCOMPARE(again->distances.layers, fresh->distances.layers);
    QCOMPARE(again->distances.position, fresh->distances.position);  // bit for bit through the JSON
    QCOMPARE(again->distances.pairs, fresh->distances.pairs);

    // A changed checkpoint has another key: recomputed, and the new distance shows the change.
    change_weight(ft1, "layers.1.block_sparse_moe.experts.6.w2");
    const auto changed = analyze_family(*open(), options);
    QVERIFY(changed && !changed->from_cache);
    QCOMPARE(calls, 48);
    QVERIFY(changed->distances.at(1, 6) != fresh->distances.at(1, 6));
    QCOMPARE(changed->distances.at(0, 3), fresh->distances.at(0, 3));

    // A damaged entry is recomputed, not trusted.
    for (const auto& e : fs::directory_iterator(cache / "distances")) std::ofstream(e.path()) << "{\"schema\": \"mosaic.distances/1\"}";
    const auto repaired = analyze_family(*open(), options);
    QVERIFY(repaired && !repaired->from_cache);
    QCOMPARE(repaired->distances.position, changed->distances.position);
    // So is one whose fields have other JSON types, or that nests without end; and a damaged hash
    // memo is an empty one.
    for (const std::string& damage : std::vector<std::string>{R"({"schema": 5, "sha256": []})",
                                                              R"({"schema": "mosaic.distances/1", "sha256": 7, "layers": "x"})",
                                                              std::string(100000, '[') + std::string(100000, ']')}) {
      for (const auto& e : fs::directory_iterator(cache / "distances")) std::ofstream(e.path()) << damage;
      std::ofstream(cache / "file-hashes.json") << damage;
      const auto again_repaired = analyze_family(*open(), options);
      QVERIFY(again_repaired && !again_repaired->from_cache);
      QCOMPARE(again_repaired->distances.position, changed->distances.position);
    }

    // Without a cache nothing is written anywhere and every call computes.
    const auto uncached = analyze_family(*open(), {std::nullopt, 1, {}});
    QVERIFY(uncached && !uncached->from_cache);
  }

  void defaultCacheDirFollowsEnvironment() {
    qputenv("MOSAIC_CACHE_DIR", "/somewhere/mosaic-cache");
    QCOMPARE(default_cache_dir(), fs::path("/somewhere/mosaic-cache"));
    qunsetenv("MOSAIC_CACHE_DIR");
    qputenv("XDG_CACHE_HOME", "/xdg");
    QCOMPARE(default_cache_dir(), fs::path("/xdg/mosaic"));
  }
};

QTEST_GUILESS_MAIN(TestFamilyAnalysis)
#include "tst_family_analysis.moc"
