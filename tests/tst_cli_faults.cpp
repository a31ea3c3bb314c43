// What happens to a record when `mosaic-cli bench` meets trouble, through the real binary: killed
// mid-sweep, handed a file it may only read, or a disk that is full before it starts.
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "cli_process.h"
#include "serving/workload.h"
#include "store/recorder.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

namespace {

// A sweep over two olmoe fixtures with one strategy.
nlohmann::json sweep(const std::string& clock, double duration, double rate) {
  return {{"schema", "mosaic.sweep/1"},
          {"variants", {fixture("olmoe", "base").string(), fixture("olmoe", "ft1").string()}},
          {"clock", clock}, {"rates", {rate}}, {"duration_seconds", duration}, {"prompt", {4, 6}}, {"output", {2, 3}},
          {"strategies", {{{"kind", "consolidated"}, {"capacity", 6}}}}};
}

// Requests recorded so far, read as another process reads a record in use (0 before the schema).
std::int64_t recorded_requests(const fs::path& db) {
  sqlite3* h = nullptr;
  std::int64_t n = 0;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(h, 1000);
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(h, "SELECT COUNT(*) FROM requests", -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
      n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_close(h);
  return n;
}

}  // namespace

class TestCliFaults : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  fs::path scratch(const std::string& name) const { return fs::path(tmp_.path().toStdString()) / name; }
  fs::path write_sweep(const std::string& name, const nlohmann::json& j) const {
    std::ofstream(scratch(name)) << j.dump();
    return scratch(name);
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    qputenv("MOSAIC_CACHE_DIR", QByteArray::fromStdString(scratch("cache").string()));
  }

  // kill -9 in the middle of a real-clock sweep: every request finished before it is kept, the file
  // is intact, the run is marked aborted when the file is next opened, and a second sweep appends.
  void killedMidSweepKeepsWhatFinished() {
    const fs::path db = scratch("killed.sqlite");
    QProcess p;
    p.start(QStringLiteral(MOSAIC_CLI), args({"bench", "--config"}) << path(write_sweep("long.json", sweep("real", 120, 20)))
                                                                      << QStringLiteral("--db") << path(db));
    QVERIFY(p.waitForStarted());
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    std::int64_t before = 0;
    while ((before = recorded_requests(db)) < 5 && std::chrono::steady_clock::now() < give_up && p.state() == QProcess::Running)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    QVERIFY2(p.state() == QProcess::Running, qPrintable(QString::fromUtf8(p.readAllStandardError())));
    QVERIFY2(before >= 5, "the sweep recorded fewer than 5 requests in 90 s");
    p.kill();  // SIGKILL
    QVERIFY(p.waitForFinished());
    QCOMPARE(p.exitStatus(), QProcess::CrashExit);

    QCOMPARE(integrity_check(db), std::string("ok"));
    std::int64_t kept = 0;
    {
      const Recorder rec(db);  // opening marks the killed process's run
      QCOMPARE(rec.runs().size(), std::size_t(1));
      QCOMPARE(rec.runs()[0].status, std::string("aborted"));
      kept = static_cast<std::int64_t>(rec.requests(rec.runs()[0].id).size());
      QVERIFY2(kept >= before, qPrintable(QStringLiteral("%1 kept of %2 seen").arg(kept).arg(before)));
    }

    const Run second = cli(args({"bench", "--config"}) << path(write_sweep("short.json", sweep("virtual", 1, 10))) << QStringLiteral("--db")
                                                        << path(db));
    QVERIFY2(second.code == 0, qPrintable(second.err));
    const Recorder rec(db);
    QCOMPARE(rec.runs().size(), std::size_t(2));
    QCOMPARE(rec.runs()[0].status, std::string("aborted"));
    QCOMPARE(static_cast<std::int64_t>(rec.requests(rec.runs()[0].id).size()), kept);
    QCOMPARE(rec.runs()[1].status, std::string("finished"));
    QVERIFY(!rec.requests(rec.runs()[1].id).empty());
    QCOMPARE(integrity_check(db), std::string("ok"));
  }

  // A record that may only be read is refused before the family is read, naming the file; it is
  // left as it was. (Root writes whatever the mode says, so as root the child runs as `nobody`.)
  void readOnlyRecordRefusedAtOnce() {
    const fs::path dir = scratch("ro");
    fs::create_directories(dir);
    fs::permissions(tmp_.path().toStdString(), fs::perms::others_exec, fs::perm_options::add);
    fs::permissions(dir, fs::perms::all);
    const fs::path db = dir / "record.sqlite";
    QCOMPARE(cli(args({"bench", "--config"}) << path(write_sweep("ro/one.json", sweep("virtual", 1, 10))) << QStringLiteral("--db") << path(db))
                 .code,
             0);
    fs::permissions(db, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
    const auto size = fs::file_size(db);
    const Run r = cli(args({"bench", "--config"}) << path(dir / "one.json") << QStringLiteral("--db") << path(db), [] {
      if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(125);
    });
    if (r.code == 125 || r.code == -1) QSKIP("cannot run mosaic-cli as an unprivileged user here (setuid failed or the binary is not reachable)");
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains(path(db)) && r.err.contains(QStringLiteral("can only be read")), qPrintable(r.err));
    QVERIFY2(!r.out.contains(QStringLiteral("strategy")), qPrintable(r.out));  // no work began: not even the table's header
    QCOMPARE(fs::file_size(db), size);
    QCOMPARE(Recorder(db).runs().size(), std::size_t(1));
  }

  // A record on a read-only mount (a WAL file cannot get its -shm there): `runs` and `report` read it,
  // and it keeps every byte. The mount is the test's own, in a user and mount namespace of its own.
  void recordOnAReadOnlyMountIsRead() {
    const fs::path dir = scratch("ro-mount");
    fs::create_directories(dir);
    const fs::path db = dir / "record.sqlite";
    QCOMPARE(cli(args({"bench", "--config"}) << path(write_sweep("ro-mount.json", sweep("virtual", 1, 10))) << QStringLiteral("--db") << path(db))
                 .code,
             0);
    const std::string before = read_text(db);
    QVERIFY(!fs::exists(dir / "record.sqlite-shm"));  // closed cleanly: nothing beside it
    const QString script =
        QStringLiteral("mount --bind '%1' '%1' && mount -o remount,bind,ro '%1' || exit 125; touch '%1/x' 2>/dev/null && exit 124; "
                       "'%2' runs --db '%3' && '%2' report --db '%3' --out '%4'")
            .arg(path(dir), QStringLiteral(MOSAIC_CLI), path(db), path(scratch("ro-report")));
    QProcess p;
    p.start(QStringLiteral("unshare"), {QStringLiteral("-rm"), QStringLiteral("sh"), QStringLiteral("-c"), script});
    if (!p.waitForStarted()) QSKIP("no unshare(1) here to make a read-only mount");
    QVERIFY(p.waitForFinished(120000));
    const QString out = QString::fromUtf8(p.readAllStandardOutput()), err = QString::fromUtf8(p.readAllStandardError());
    if (p.exitCode() == 125 || (p.exitCode() != 0 && err.contains(QStringLiteral("unshare")))) QSKIP(qPrintable(QStringLiteral("cannot make a read-only mount here: ") + err));
    QVERIFY2(p.exitCode() != 124, "the bind mount was not read-only");
    QVERIFY2(p.exitCode() == 0, qPrintable(err));
    QVERIFY2(out.contains(QStringLiteral("finished")), qPrintable(out));
    QVERIFY(fs::exists(scratch("ro-report") / "runs.csv"));
    QCOMPARE(read_text(db), before);
  }

  // A disk that is full before anything is written: refused at once, and no empty file is left.
  void fullDiskAtOpenRefusedAtOnce() {
    const fs::path db = scratch("full.sqlite");
    const Run r = cli_on_small_disk(args({"bench", "--config"}) << path(write_sweep("full.json", sweep("virtual", 1, 10)))
                                                                 << QStringLiteral("--db") << path(db),
                                    0);
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains(path(db)) && r.err.contains(QStringLiteral("SQLite")), qPrintable(r.err));
    QVERIFY2(!r.out.contains(QStringLiteral("strategy")), qPrintable(r.out));
    QVERIFY(!fs::exists(db));
  }

  // Outputs that would land on what a command reads are refused before any work, naming the flag.
  void outputsNeverLandOnInputs() {
    const fs::path cfg = write_sweep("guarded.json", sweep("virtual", 1, 10));
    Run r = cli(args({"bench", "--config"}) << path(cfg) << QStringLiteral("--db") << path(fixture("olmoe", "ft1") / "runs.sqlite"));
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains(QStringLiteral("--db")) && r.err.contains(QStringLiteral("inside the input folder")), qPrintable(r.err));
    QVERIFY(!fs::exists(fixture("olmoe", "ft1") / "runs.sqlite"));
    r = cli(args({"bench-quality", "--family"}) << path(fixture("olmoe")) << QStringLiteral("--target") << QStringLiteral("ft1")
                                                << QStringLiteral("--others") << QStringLiteral("ft2") << QStringLiteral("--out")
                                                << path(fixture("olmoe", "ft2") / "quality"));
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains(QStringLiteral("--out")) && r.err.contains(QStringLiteral("inside the input folder")), qPrintable(r.err));
    QVERIFY(!fs::exists(fixture("olmoe", "ft2") / "quality"));
    fs::copy_file(fs::path(MOSAIC_TEST_DATA) / ".." / ".." / "sample_configs" / "forge-sample.json", scratch("recipe.json"));
    r = cli(args({"forge", "--recipe"}) << path(scratch("recipe.json")) << QStringLiteral("--output") << path(scratch("recipe.json")));
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains(QStringLiteral("--output")) && r.err.contains(QStringLiteral("one of this command's inputs")), qPrintable(r.err));
  }

  // On the real clock a replay lasts as long as its trace: an arrival past the run's duration is
  // refused before any run starts (it held the sweep as long as the arrival was away).
  void realClockTraceBoundedByDuration() {
    write_trace(scratch("far.jsonl"), {{0.0, "ft1", {1, 2, 3}, 2}, {1e6, "base", {4, 5}, 3}});
    nlohmann::json j = sweep("real", 30, 1);
    j.erase("rates");
    j["trace"] = scratch("far.jsonl").string();
    const auto t0 = std::chrono::steady_clock::now();
    const Run r = cli(args({"bench", "--config"}) << path(write_sweep("far.json", j)) << QStringLiteral("--db") << path(scratch("far.sqlite")));
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains(QStringLiteral("far.jsonl")) && r.err.contains(QStringLiteral("request 2")) &&
                 r.err.contains(QStringLiteral("duration_seconds")),
             qPrintable(r.err));
    QVERIFY(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
    QVERIFY(!fs::exists(scratch("far.sqlite")) || Recorder(scratch("far.sqlite")).runs().empty());
  }
};

QTEST_GUILESS_MAIN(TestCliFaults)
#include "tst_cli_faults.moc"
