// mosaic-cli end to end: the real binary on the fixtures, its outputs read back, its errors.
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

namespace {
struct Run {
  int code = -1;
  QString out, err;
};
Run cli(const QStringList& args) {
  QProcess p;
  p.start(QStringLiteral(MOSAIC_CLI), args);
  if (!p.waitForFinished(120000)) return {};
  return {p.exitCode(), QString::fromUtf8(p.readAllStandardOutput()), QString::fromUtf8(p.readAllStandardError())};
}
QString path(const fs::path& p) { return QString::fromStdString(p.string()); }
const QString kPrompt = QStringLiteral("165,299,204,8,63,73,11,261,79,192,208,129");
}  // namespace

class TestCli : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  fs::path scratch(const std::string& name) const { return fs::path(tmp_.path().toStdString()) / name; }

 private Q_SLOTS:
  void initTestCase() { QVERIFY(tmp_.isValid()); }

  void inspectFamily() {
    const Run r = cli({QStringLiteral("inspect"), path(fixture("qwen2_moe"))});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QVERIFY(r.out.contains(QStringLiteral("family: 6 variants of one qwen2_moe model, all match")));
    QVERIFY(r.out.contains(QStringLiteral("variant esft2")));
    QVERIFY(r.out.contains(QStringLiteral("shared expert width 96")));
    QVERIFY(r.out.contains(QStringLiteral("F32 (")));
  }

  void logitsFileMatchesReference() {
    const fs::path out = scratch("logits.safetensors");
    const Run r = cli({QStringLiteral("logits"), QStringLiteral("--model"), path(fixture("olmoe", "esft2")),
                       QStringLiteral("--ids"), kPrompt, QStringLiteral("--out"), path(out), QStringLiteral("--threads"), QStringLiteral("1")});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    const SafetensorsFile f(out);
    const TensorInfo* t = f.find("logits");
    QVERIFY(t);
    QCOMPARE(t->shape, (std::vector<std::int64_t>{12, 320}));
    const auto got = read_f32(f, "logits");
    const SafetensorsFile ref(fixture("olmoe") / "reference.safetensors");
    auto want = read_f32(ref, "logits.esft2");
    want.resize(got.size());  // row 0's first 12 positions
    QVERIFY(relative_error(got, want) <= 1e-4);
  }

  void generatePrintsGreedyIds() {
    const Run r = cli({QStringLiteral("generate"), QStringLiteral("--model"), path(fixture("mixtral", "base")),
                       QStringLiteral("--ids"), kPrompt, QStringLiteral("--max-new"), QStringLiteral("3")});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QCOMPARE(r.out.trimmed(), QStringLiteral("193,290,108"));  // transformers' greedy continuation
  }

  void badInputIsReportedAndNothingIsWritten() {
    const fs::path dir = copy_checkpoint(fixture("mixtral", "base"), scratch("broken"));
    fs::resize_file(dir / "model.safetensors", 4000);
    const fs::path out = scratch("never.safetensors");
    const Run r = cli({QStringLiteral("logits"), QStringLiteral("--model"), path(dir), QStringLiteral("--ids"), kPrompt,
                       QStringLiteral("--out"), path(out)});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.startsWith(QStringLiteral("error: ")) && r.err.contains(path(dir / "model.safetensors")), qPrintable(r.err));
    QVERIFY(!fs::exists(out));

    const Run mixed = cli({QStringLiteral("inspect"), path(fixture("mixtral", "base")), path(fixture("olmoe", "ft1"))});
    QCOMPARE(mixed.code, 2);
    QVERIFY2(mixed.err.contains(QStringLiteral("does not match")), qPrintable(mixed.err));

    const Run ids = cli({QStringLiteral("generate"), QStringLiteral("--model"), path(fixture("mixtral", "base")),
                         QStringLiteral("--ids"), QStringLiteral("1,x,3")});
    QCOMPARE(ids.code, 2);
    QVERIFY2(ids.err.contains(QStringLiteral("'x'")), qPrintable(ids.err));
  }
};

QTEST_GUILESS_MAIN(TestCli)
#include "tst_cli.moc"
