// The SQLite record: what is written reads back, the views answer in plain SQL, a version-1 file
// migrates, foreign and newer files are refused, and a process killed in the middle of a run
// leaves a database that opens and holds every request it had finished.
#include <QTemporaryDir>
#include <QTest>

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "analysis/family_analysis.h"
#include "common/error.h"
#include "serving/runner.h"
#include "store/recorder.h"
#include "store/report_data.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

namespace {
// Runs `sql` on the file with the plain SQLite API and returns the first column of the first row.
std::string query(const fs::path& db, const std::string& sql) {
  sqlite3* h = nullptr;
  sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READWRITE, nullptr);
  sqlite3_stmt* s = nullptr;
  std::string out = "<error>";
  if (sqlite3_prepare_v2(h, sql.c_str(), -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
    const auto* t = sqlite3_column_text(s, 0);
    out = t ? reinterpret_cast<const char*>(t) : "NULL";
  }
  sqlite3_finalize(s);
  sqlite3_close(h);
  return out;
}

// A record of schema version 1 holding one run of one request.
void write_version_one(const fs::path& db) {
  sqlite3* h = nullptr;
  sqlite3_open(db.c_str(), &h);
  const std::string v1 = Recorder::migrations()[0] + "PRAGMA user_version = 1;"
                         "INSERT INTO runs VALUES (1, '2026-01-01T00:00:00Z', 'single', '{}');"
                         "INSERT INTO requests VALUES (1, 0, 'base', 0.0, 0.5, 0.75, 2.0, 25);";
  QCOMPARE(sqlite3_exec(h, v1.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(h);
}

RequestRecord sample_record(std::int64_t index) {
  RequestRecord r{.index = index, .target = "ft1", .lane = 0,
                  .stats = {.arrival = 1.0 * index, .start = 1.5 * index, .first_token = 1.5 * index + 0.25,
                            .finish = 1.5 * index + 1, .prompt_tokens = 20, .generated_tokens = 25, .preemptions = index}};
  r.stats.counters.swaps = 1;
  r.stats.counters.swap_seconds = 0.01;
  r.stats.counters.swap_bytes = 4096;
  r.stats.counters.layers = {{.hits = 30, .misses = 10, .loads = 4, .load_bytes = 1000, .load_seconds = 0.002,
                              .disk_loads = 3, .disk_bytes = 600, .disk_seconds = 0.0015},
                       {.hits = 40, .misses = 0, .prefetches = 3, .prefetch_used = 2, .prefetch_bytes = 750, .prefetch_seconds = 0.001}};
  // Steps it ran alone: layer 0 twice with 1 of its top-2 resident, once with none; layer 1 once with both.
  r.stats.counters.layers[0].add_alone(1, 0.001, 0.004);
  r.stats.counters.layers[0].add_alone(1, 0.001, 0.006);
  r.stats.counters.layers[0].add_alone(0, 0.002, 0.010);
  r.stats.counters.layers[1].add_alone(2, 0.001, 0.002);
  return r;
}
}  // namespace

class TestRecorder : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  fs::path scratch(const std::string& name) const { return fs::path(tmp_.path().toStdString()) / name; }

 private Q_SLOTS:
  void initTestCase() { QVERIFY(tmp_.isValid()); }

  void recordsReadBackAndViewsAnswer() {
    const fs::path db = scratch("runs.sqlite");
    std::int64_t run = 0;
    {
      Recorder rec(db);
      QCOMPARE(rec.schema_version(), Recorder::kSchemaVersion);
      run = rec.begin_run("consolidated", R"({"capacity": 12})");
      for (int i = 0; i < 3; ++i) {
        RequestRecord r = sample_record(i);
        if (i == 1)  // a traced request: two choices of position 0 in layer 1
          r.routes = {{.token = 0, .layer = 1, .expert = 3, .outcome = RoutedExpert::Outcome::Hit, .served_by = 2, .served_expert = 3},
                      {.token = 0, .layer = 1, .expert = 5, .outcome = RoutedExpert::Outcome::Miss, .served_by = 1, .served_expert = 5}};
        rec.record(run, r);
      }
      rec.sample(run, 0.5, "queue_length", 2);
      rec.finish_run(run, "finished");
    }
    Recorder rec(db);
    const auto runs = rec.runs();
    QCOMPARE(runs.size(), std::size_t(1));
    QCOMPARE(runs[0].strategy, std::string("consolidated"));
    QCOMPARE(runs[0].config_json, std::string(R"({"capacity": 12})"));
    QCOMPARE(runs[0].status, std::string("finished"));
    QVERIFY(runs[0].machine.find("cores") != std::string::npos && runs[0].build.find("Mosaic") != std::string::npos);
    const auto back = rec.requests(run);
    QCOMPARE(back.size(), std::size_t(3));
    const RequestRecord want = sample_record(2);
    QCOMPARE(back[2].stats.finish, want.stats.finish);
    QCOMPARE(back[2].stats.first_token, want.stats.first_token);
    QCOMPARE(back[2].stats.preemptions, std::int64_t(2));
    QCOMPARE(back[2].stats.counters.swap_bytes, std::uint64_t(4096));
    QCOMPARE(back[2].stats.counters.layers.size(), std::size_t(2));
    QCOMPARE(back[2].stats.counters.layers[0].misses, std::int64_t(10));
    QCOMPARE(back[2].stats.counters.layers[0].load_bytes, std::uint64_t(1000));
    QCOMPARE(back[2].stats.counters.layers[1].prefetches, std::int64_t(3));
    QCOMPARE(back[2].stats.counters.layers[1].prefetch_used, std::int64_t(2));
    QCOMPARE(back[2].stats.counters.layers[1].prefetch_bytes, std::uint64_t(750));
    QCOMPARE(back[2].stats.counters.layers[1].prefetch_seconds, 0.001);
    QCOMPARE(back[2].stats.counters.layers[0].disk_loads, std::int64_t(3));
    QCOMPARE(back[2].stats.counters.layers[0].disk_bytes, std::uint64_t(600));
    QCOMPARE(back[2].stats.counters.layers[0].disk_seconds, 0.0015);
    // Per-layer times of the steps it ran alone, by hits: layer 1 has no rows for 0 or 1 hits.
    const auto& alone = back[2].stats.counters.layers[0].alone;
    QCOMPARE(alone.size(), std::size_t(2));
    QCOMPARE(alone[1].steps, std::int64_t(2));
    QCOMPARE(alone[1].expert_seconds, 0.010);
    QCOMPARE(alone[0].attention_seconds, 0.002);
    QCOMPARE(back[2].stats.counters.layers[1].alone.size(), std::size_t(3));
    QCOMPARE(back[2].stats.counters.layers[1].alone[0].steps, std::int64_t(0));
    QCOMPARE(back[2].stats.counters.layers[1].alone[2].steps, std::int64_t(1));
    QCOMPARE(summarize(back).hit_rate, summarize({want, sample_record(0), sample_record(1)}).hit_rate);
    const auto routes = rec.routes(run, 1);
    QCOMPARE(routes.size(), std::size_t(2));
    QCOMPARE(routes[1].expert, std::int16_t(5));
    QCOMPARE(routes[1].outcome, RoutedExpert::Outcome::Miss);
    QCOMPARE(routes[0].served_by, std::int16_t(2));
    QVERIFY(rec.routes(run, 0).empty());
    const auto queue = rec.samples(run, "queue_length");
    QCOMPARE(queue.size(), std::size_t(1));
    QCOMPARE(queue[0].value, 2.0);
    Recorder writer(db);
    writer.record_samples(run, time_series(back));
    const auto in_system = rec.samples(run, "in_system");
    QCOMPARE(in_system.size(), std::size_t(6));  // 3 arrivals, 3 finishes
    QCOMPARE(rec.samples(run, "completed").back().value, 3.0);
    // The views, as someone in the sqlite3 shell would use them.
    QCOMPARE(query(db, "SELECT requests FROM run_summary"), std::string("3"));
    QCOMPARE(query(db, "SELECT ttft FROM request_metrics WHERE idx = 2"), std::string("1.25"));
    QCOMPARE(query(db, "SELECT hit_rate FROM layer_hit_rates WHERE layer = 0"), std::string("0.75"));
    QCOMPARE(query(db, "SELECT ram_loads || ' ' || disk_loads FROM layer_hit_rates WHERE layer = 0"), std::string("3 9"));
    QCOMPARE(query(db, "SELECT layer_steps || ' ' || printf('%.4f', expert_seconds) FROM layer_latency_by_hits WHERE hits = 1"), std::string("6 0.0050"));
    QCOMPARE(query(db, "PRAGMA journal_mode"), std::string("wal"));
  }

  void migratesAVersionOneFile() {
    const fs::path db = scratch("v1.sqlite");
    write_version_one(db);
    Recorder rec(db);
    QCOMPARE(rec.schema_version(), Recorder::kSchemaVersion);
    const auto old = rec.requests(1);
    QCOMPARE(old.size(), std::size_t(1));
    QCOMPARE(old[0].stats.generated_tokens, std::int64_t(25));
    QCOMPARE(old[0].stats.first_token, 0.75);
    QCOMPARE(old[0].stats.preemptions, std::int64_t(0));  // a column versions 1 and 2 did not have
    QCOMPARE(rec.runs()[0].status, std::string("unknown"));  // a column version 1 did not have
    const auto run = rec.begin_run("consolidated", "{}");    // and new runs go in beside it
    rec.record(run, sample_record(0));
    QCOMPARE(query(db, "SELECT COUNT(*) FROM request_metrics"), std::string("2"));
  }

  // A reader's open never writes: an older schema is read through a copy migrated in memory, a run
  // whose recorder is gone reads as aborted without being marked, and the file keeps every byte.
  void readOnlyAccessLeavesTheFileAsItWas() {
    const fs::path db = scratch("v1-read.sqlite");
    write_version_one(db);
    const std::string before = read_text(db);
    {
      const Recorder rec(db, Recorder::Access::ReadOnly);
      QCOMPARE(rec.schema_version(), Recorder::kSchemaVersion);  // the copy's
      QCOMPARE(rec.requests(1).size(), std::size_t(1));
      QCOMPARE(rec.requests(1)[0].stats.preemptions, std::int64_t(0));
      expect_mentions(error_of<IoError>([&] { rec.check_writable(); }), {"can only be read"});
    }
    QCOMPARE(read_text(db), before);
    QCOMPARE(query(db, "PRAGMA user_version"), std::string("1"));

    // A run left 'running' by a process that is gone (no owner noted: an older Mosaic's).
    const fs::path current = scratch("abandoned-read.sqlite");
    {
      Recorder rec(current);
      rec.begin_run("consolidated", "{}");
    }
    sqlite3* h = nullptr;
    sqlite3_open(current.c_str(), &h);
    QCOMPARE(sqlite3_exec(h, "UPDATE runs SET owner = ''", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(h);
    QCOMPARE(Recorder(current, Recorder::Access::ReadOnly).runs()[0].status, std::string("aborted"));
    QCOMPARE(query(current, "SELECT status FROM runs"), std::string("running"));  // not marked in the file
    expect_mentions(error_of<MissingError>([&] { Recorder(scratch("absent.sqlite"), Recorder::Access::ReadOnly); }), {"does not exist"});
    QVERIFY(!fs::exists(scratch("absent.sqlite")));
  }

  // Written in WAL mode (concurrent readers), a record goes back to one file when its last writer
  // closes, so reading it read-only (runs, report, the workbench) leaves no -wal and -shm beside it;
  // while another connection holds it, the writer leaves the switch to that one.
  void aRecordAtRestIsOneFile() {
    const fs::path db = scratch("at-rest.sqlite");
    auto beside = [&] { return fs::exists(db.string() + "-wal") || fs::exists(db.string() + "-shm"); };
    {
      Recorder rec(db);
      rec.finish_run(rec.begin_run("consolidated", "{}"), "finished");
      QCOMPARE(query(db, "PRAGMA journal_mode"), std::string("wal"));
    }
    QVERIFY(!beside());
    QCOMPARE(Recorder(db, Recorder::Access::ReadOnly).runs().size(), std::size_t(1));
    QVERIFY(!beside());
    {
      Recorder first(db);
      {
        Recorder second(db);
        second.finish_run(second.begin_run("time-sharing", "{}"), "finished");
      }
      QVERIFY(beside());  // first still has it open
      QCOMPARE(first.runs().size(), std::size_t(2));
    }
    QVERIFY(!beside());
    QCOMPARE(query(db, "PRAGMA integrity_check"), std::string("ok"));
  }

  void refusesForeignAndNewerFiles() {
    std::ofstream(scratch("text.sqlite")) << "this is not a database at all, just some text that is long enough";
    // Said as what it is, with what to do, read or written (a reader is not told to record), and left as it was.
    expect_mentions(error_of<FormatError>([&] { Recorder r(scratch("text.sqlite"), Recorder::Access::ReadWrite); }),
                    {"text.sqlite", "is not an SQLite database", "a path that does not exist yet"});
    const std::string read = error_of<FormatError>([&] { Recorder r(scratch("text.sqlite"), Recorder::Access::ReadOnly); });
    expect_mentions(read, {"text.sqlite", "is not an SQLite database", "give a record"});
    QVERIFY2(read.find("does not exist yet") == std::string::npos, read.c_str());
    QCOMPARE(fs::file_size(scratch("text.sqlite")), std::uintmax_t(65));
    QVERIFY(!fs::exists(scratch("text.sqlite-wal")) && !fs::exists(scratch("text.sqlite-journal")));
    const fs::path other = scratch("other.sqlite");
    {
      sqlite3* h = nullptr;
      sqlite3_open(other.c_str(), &h);
      sqlite3_exec(h, "CREATE TABLE notes (x TEXT);", nullptr, nullptr, nullptr);
      sqlite3_close(h);
    }
    expect_mentions(error_of<FormatError>([&] { Recorder r(other); }), {"not a Mosaic record"});
    const fs::path newer = scratch("newer.sqlite");
    { Recorder r(newer); }
    query(newer, "PRAGMA user_version = 99");
    expect_mentions(error_of<FormatError>([&] { Recorder r(newer); }), {"schema version 99", "newer Mosaic"});
    query(newer, "PRAGMA user_version = -1");  // once read as migrations()[size_t(-1)]
    expect_mentions(error_of<FormatError>([&] { Recorder r(newer); }), {"schema version -1", "not one Mosaic writes"});
    expect_mentions(error_of<IoError>([&] { Recorder r(scratch("no/such/folder/x.sqlite")); }), {"cannot be opened"});
  }

  // A damaged record (its pages overwritten, the header intact) is refused when opened, before
  // anything is appended to it.
  void damagedFileIsRefused() {
    const fs::path db = scratch("damaged.sqlite");
    {
      Recorder rec(db);
      const auto run = rec.begin_run("consolidated", "{}");
      for (int i = 0; i < 50; ++i) rec.record(run, sample_record(i));
      rec.finish_run(run, "finished");
    }
    QVERIFY(fs::file_size(db) > 3 * 4096);
    {
      std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
      const std::string junk(fs::file_size(db) - 4096, '\xA5');
      f.seekp(4096);
      f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
    }
    const std::string msg = error_of<Error>([&] { Recorder r(db); });
    expect_mentions(msg, {db.string()});
    QVERIFY2(msg.find("damaged") != std::string::npos || msg.find("malformed") != std::string::npos, msg.c_str());
  }

  // Processes that create and record into one new database at the same moment serialize: each
  // run is recorded whole, none dies of "database is locked" or of a migration run twice.
  void concurrentWritersSerialize() {
    constexpr int kTrials = 6, kWriters = 4, kRequests = 20;
    for (int trial = 0; trial < kTrials; ++trial) {
      const fs::path db = scratch("shared-" + std::to_string(trial) + ".sqlite");
      int go[2];
      QCOMPARE(::pipe(go), 0);
      std::vector<pid_t> children;
      for (int w = 0; w < kWriters; ++w) {
        const pid_t child = ::fork();
        QVERIFY(child >= 0);
        if (child == 0) {
          ::close(go[1]);
          char c;
          (void)!::read(go[0], &c, 1);  // all start when the parent closes the pipe
          int code = 0;
          try {
            Recorder rec(db);
            const auto run = rec.begin_run("writer-" + std::to_string(w), "{}");
            for (int i = 0; i < kRequests; ++i) rec.record(run, sample_record(i));
            rec.finish_run(run, "finished");
          } catch (const std::exception& e) {
            std::fprintf(stderr, "writer %d: %s\n", w, e.what());
            code = 1;
          }
          ::_exit(code);
        }
        children.push_back(child);
      }
      ::close(go[0]);
      ::close(go[1]);
      for (const pid_t child : children) {
        int status = 0;
        ::waitpid(child, &status, 0);
        QVERIFY2(WIFEXITED(status) && WEXITSTATUS(status) == 0, ("a writer failed in trial " + std::to_string(trial)).c_str());
      }
      QCOMPARE(query(db, "PRAGMA integrity_check"), std::string("ok"));
      const Recorder rec(db);
      const auto runs = rec.runs();
      QCOMPARE(runs.size(), std::size_t(kWriters));
      for (const auto& run : runs) {
        QCOMPARE(run.status, std::string("finished"));
        QCOMPARE(rec.requests(run.id).size(), std::size_t(kRequests));
      }
    }
  }

  // A child runs a real workload, recording each finished request; the parent kills it after the
  // third and opens what is left.
  void killedMidRunKeepsFinishedRequests() {
    const fs::path db = scratch("killed.sqlite");
    int pipefd[2];
    QCOMPARE(::pipe(pipefd), 0);
    const pid_t child = ::fork();
    QVERIFY(child >= 0);
    if (child == 0) {
      ::close(pipefd[0]);
      try {
        Family f;
        for (const char* v : {"base", "ft1"}) f.add(v, fixture("olmoe", v));
        const HostStore store(f);
        const auto analysis = analyze_family(f);
        const Deployment server({.kind = StrategyKind::Consolidated, .capacity = 8}, f, store, *analysis, scratch(""));
        Recorder rec(db);
        const auto run = rec.begin_run("consolidated", "{}");
        std::vector<WorkloadRequest> w(1000, WorkloadRequest{0, "ft1", {1, 2, 3}, 2});
        for (std::size_t i = 0; i < w.size(); ++i) w[i].target = i % 2 ? "ft1" : "base";
        int finished = 0;
        run_workload(server, w, {.on_finished = [&](const RequestRecord& r) {
                                   rec.record(run, r);
                                   if (++finished == 3) (void)!::write(pipefd[1], "3", 1);
                                   if (finished >= 3) ::pause();  // wait here to be killed
                                 }});
      } catch (...) {
      }
      ::_exit(1);
    }
    ::close(pipefd[1]);
    char c = 0;
    QCOMPARE(::read(pipefd[0], &c, 1), ssize_t(1));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ::close(pipefd[0]);
    QVERIFY(WIFSIGNALED(status));

    Recorder rec(db);
    const auto runs = rec.runs();
    QCOMPARE(runs.size(), std::size_t(1));
    QCOMPARE(runs[0].status, std::string("aborted"));  // its process is gone: marked when the file is next opened
    const auto requests = rec.requests(runs[0].id);
    QCOMPARE(requests.size(), std::size_t(3));
    // The three that finished first (affinity admission runs a resident variant's requests first:
    // not necessarily the first three of the workload), each whole.
    for (std::size_t i = 0; i < 3; ++i) {
      QVERIFY(requests[i].index >= 0 && requests[i].index < 1000 && (i == 0 || requests[i].index > requests[i - 1].index));
      QCOMPARE(requests[i].stats.counters.layers.size(), std::size_t(3));
    }
    QCOMPARE(query(db, "PRAGMA integrity_check"), std::string("ok"));
    // Reports leave the aborted run out unless asked for it (its numbers are partial).
    const ReportData d = load_report_data(rec, {}, "killed.sqlite");
    QVERIFY(d.runs.empty());
    QCOMPARE(d.left_out.size(), std::size_t(1));
    QCOMPARE(load_report_data(rec, {}, "killed.sqlite", /*incomplete=*/true).runs.size(), std::size_t(1));
    QCOMPARE(load_report_data(rec, {runs[0].id}, "killed.sqlite").runs.size(), std::size_t(1));
    // A run this process is recording stays 'running' when another opens the file; a second run
    // appends beside the aborted one.
    const auto live = rec.begin_run("consolidated", "{}");
    rec.record(live, sample_record(0));
    { Recorder other(db); }
    QCOMPARE(rec.runs().back().status, std::string("running"));
    rec.finish_run(live, "finished");
    QCOMPARE(load_report_data(rec, {}, "killed.sqlite").runs.size(), std::size_t(1));
    // A run recorded in another PID namespace (a container on this host) is not judged by PIDs here;
    // one of this namespace whose process is gone is.
    const auto elsewhere = rec.begin_run("consolidated", "{}"), here = rec.begin_run("consolidated", "{}");
    const std::string owner = query(db, "SELECT owner FROM runs WHERE id = " + std::to_string(here));
    const std::string scope = owner.substr(0, owner.rfind(':'));
    QVERIFY2(scope.find("/pid:[") != std::string::npos, owner.c_str());
    query(db, "UPDATE runs SET owner = '" + scope.substr(0, scope.find('/')) + "/pid:[1]:999999999' WHERE id = " + std::to_string(elsewhere));
    query(db, "UPDATE runs SET owner = '" + scope + ":999999999' WHERE id = " + std::to_string(here));
    { Recorder other(db); }
    QCOMPARE(query(db, "SELECT status FROM runs WHERE id = " + std::to_string(elsewhere)), std::string("running"));
    QCOMPARE(query(db, "SELECT status FROM runs WHERE id = " + std::to_string(here)), std::string("aborted"));
  }
};

QTEST_GUILESS_MAIN(TestRecorder)
#include "tst_recorder.moc"
