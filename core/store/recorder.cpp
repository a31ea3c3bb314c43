#include "store/recorder.h"

#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/error.h"
#include "common/machine.h"

namespace mosaic {
namespace {

// How long a writer waits for another process's transaction before giving up with an error.
constexpr int kBusyTimeoutMs = 10000;

// One prepared statement, finalized on scope exit.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql, const std::string& file) : db_(db), file_(file) {
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt_, nullptr) != SQLITE_OK) fail("prepare");
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int i, std::int64_t v) { return check(sqlite3_bind_int64(stmt_, i, v)); }
  Statement& bind(int i, double v) { return check(sqlite3_bind_double(stmt_, i, v)); }
  Statement& bind(int i, const std::string& v) {
    return check(sqlite3_bind_text(stmt_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  bool step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) fail("step");
    return false;
  }
  void run() {
    step();
    sqlite3_reset(stmt_);
  }
  std::int64_t i64(int c) const { return sqlite3_column_int64(stmt_, c); }
  double f64(int c) const { return sqlite3_column_double(stmt_, c); }
  std::string text(int c) const {
    const auto* t = sqlite3_column_text(stmt_, c);
    return t ? reinterpret_cast<const char*>(t) : "";
  }

 private:
  Statement& check(int rc) {
    if (rc != SQLITE_OK) fail("bind");
    return *this;
  }
  [[noreturn]] void fail(const char* what) const {
    throw IoError(file_, "", std::string("SQLite ") + what + " failed: " + sqlite3_errmsg(db_));
  }
  sqlite3* db_;
  std::string file_;
  sqlite3_stmt* stmt_ = nullptr;
};

}  // namespace

const std::vector<std::string>& Recorder::migrations() {
  static const std::vector<std::string> m = {
      // 1: runs and the requests' timings.
      R"sql(
CREATE TABLE runs (id INTEGER PRIMARY KEY, started_at TEXT NOT NULL, strategy TEXT NOT NULL, config_json TEXT NOT NULL);
CREATE TABLE requests (
  run_id INTEGER NOT NULL REFERENCES runs(id), idx INTEGER NOT NULL, target TEXT NOT NULL,
  arrival REAL NOT NULL, start REAL NOT NULL, first_token REAL NOT NULL, finish REAL NOT NULL,
  output_tokens INTEGER NOT NULL, PRIMARY KEY (run_id, idx));
)sql",
      // 2: machine and build per run, run status, counters per request and per layer, samples, views.
      R"sql(
ALTER TABLE runs ADD COLUMN machine TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN build TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN finished_at TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN status TEXT NOT NULL DEFAULT 'unknown';
ALTER TABLE requests ADD COLUMN lane INTEGER NOT NULL DEFAULT 0;
ALTER TABLE requests ADD COLUMN prompt_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE requests ADD COLUMN outcome TEXT NOT NULL DEFAULT 'length';
ALTER TABLE requests ADD COLUMN error TEXT NOT NULL DEFAULT '';
ALTER TABLE requests ADD COLUMN swaps INTEGER NOT NULL DEFAULT 0;
ALTER TABLE requests ADD COLUMN swap_seconds REAL NOT NULL DEFAULT 0;
ALTER TABLE requests ADD COLUMN swap_bytes INTEGER NOT NULL DEFAULT 0;
CREATE TABLE request_layers (
  run_id INTEGER NOT NULL, idx INTEGER NOT NULL, layer INTEGER NOT NULL,
  hits INTEGER NOT NULL, misses INTEGER NOT NULL, loads INTEGER NOT NULL,
  load_bytes INTEGER NOT NULL, load_seconds REAL NOT NULL,
  PRIMARY KEY (run_id, idx, layer), FOREIGN KEY (run_id, idx) REFERENCES requests(run_id, idx));
CREATE TABLE samples (run_id INTEGER NOT NULL REFERENCES runs(id), t REAL NOT NULL, name TEXT NOT NULL, value REAL NOT NULL);
CREATE INDEX samples_by_run ON samples(run_id, name, t);
CREATE VIEW request_metrics AS
  SELECT run_id, idx, target, lane, outcome, prompt_tokens, output_tokens,
         start - arrival AS queue_wait, first_token - arrival AS ttft, finish - arrival AS turnaround,
         CASE WHEN output_tokens > 1 THEN (finish - first_token) / (output_tokens - 1) END AS tpot,
         swap_seconds, swap_bytes
  FROM requests;
CREATE VIEW run_summary AS
  SELECT r.id AS run_id, r.strategy, r.status, COUNT(m.idx) AS requests, SUM(m.output_tokens) AS output_tokens,
         AVG(m.ttft) AS mean_ttft, AVG(m.turnaround) AS mean_turnaround, SUM(m.swap_seconds) AS swap_seconds,
         r.machine, r.started_at
  FROM runs r LEFT JOIN request_metrics m ON m.run_id = r.id GROUP BY r.id;
CREATE VIEW layer_hit_rates AS
  SELECT run_id, layer, SUM(hits) AS hits, SUM(misses) AS misses,
         CAST(SUM(hits) AS REAL) / NULLIF(SUM(hits) + SUM(misses), 0) AS hit_rate
  FROM request_layers GROUP BY run_id, layer;
)sql",
      // 3: continuous batching: how often a request gave its KV blocks back and was recomputed.
      R"sql(
ALTER TABLE requests ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;
)sql",
      // 4: traced runs: where each token's router choices went (outcome 0 hit, 1 miss, 2 dropped;
      // served_by indexes the run config's "targets").
      R"sql(
CREATE TABLE request_routes (
  run_id INTEGER NOT NULL, idx INTEGER NOT NULL, position INTEGER NOT NULL, layer INTEGER NOT NULL,
  expert INTEGER NOT NULL, outcome INTEGER NOT NULL, served_by INTEGER NOT NULL, served_expert INTEGER NOT NULL,
  FOREIGN KEY (run_id, idx) REFERENCES requests(run_id, idx));
CREATE INDEX request_routes_by_request ON request_routes(run_id, idx);
)sql",
      // 5: which process records a run ("host:pid"), so that a run left 'running' by a killed one
      // is told apart from one another process is recording now.
      R"sql(
ALTER TABLE runs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
)sql",
      // 6: Multi-MoE's Table 1: each MoE layer's time in steps where the request ran one token alone,
      // by how many of its top-k experts were resident (only rows with steps).
      R"sql(
CREATE TABLE request_layer_alone (
  run_id INTEGER NOT NULL, idx INTEGER NOT NULL, layer INTEGER NOT NULL, hits INTEGER NOT NULL,
  steps INTEGER NOT NULL, attention_seconds REAL NOT NULL, expert_seconds REAL NOT NULL,
  PRIMARY KEY (run_id, idx, layer, hits), FOREIGN KEY (run_id, idx) REFERENCES requests(run_id, idx));
CREATE VIEW layer_latency_by_hits AS
  SELECT run_id, hits, SUM(steps) AS layer_steps, SUM(attention_seconds) / SUM(steps) AS attention_seconds,
         SUM(expert_seconds) / SUM(steps) AS expert_seconds
  FROM request_layer_alone GROUP BY run_id, hits;
)sql",
      // 7: the prefetch miss policy: experts loaded ahead into each layer, those a pair then hit,
      // and the time the step spent on them that nothing hid.
      R"sql(
ALTER TABLE request_layers ADD COLUMN prefetches INTEGER NOT NULL DEFAULT 0;
ALTER TABLE request_layers ADD COLUMN prefetch_used INTEGER NOT NULL DEFAULT 0;
ALTER TABLE request_layers ADD COLUMN prefetch_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE request_layers ADD COLUMN prefetch_seconds REAL NOT NULL DEFAULT 0;
)sql",
      // 8: the host tier: of the loads, those whose bytes were read from disk (not in RAM under the
      // host budget), and the time that took; hit rates by the three outcomes.
      R"sql(
ALTER TABLE request_layers ADD COLUMN disk_loads INTEGER NOT NULL DEFAULT 0;
ALTER TABLE request_layers ADD COLUMN disk_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE request_layers ADD COLUMN disk_seconds REAL NOT NULL DEFAULT 0;
DROP VIEW layer_hit_rates;
CREATE VIEW layer_hit_rates AS
  SELECT run_id, layer, SUM(hits) AS hits, SUM(misses) AS misses,
         CAST(SUM(hits) AS REAL) / NULLIF(SUM(hits) + SUM(misses), 0) AS hit_rate,
         SUM(loads) - SUM(disk_loads) AS ram_loads, SUM(disk_loads) AS disk_loads
  FROM request_layers GROUP BY run_id, layer;
)sql"};
  return m;
}

namespace {

// A path as an SQLite URI's path: the characters a URI gives meaning to, percent-encoded.
std::string uri_path(const std::filesystem::path& p) {
  const std::string abs = std::filesystem::absolute(p).string();
  std::string out;
  for (unsigned char c : abs) {
    if (c == '%' || c == '?' || c == '#' || c < 0x20) {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// Whether a file that exists and holds bytes is something other than SQLite (its header is not
// "SQLite format 3"): said as such, not as the step that fails on it ("file is not a database").
bool foreign_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec) || std::filesystem::file_size(path, ec) == 0 || ec) return false;
  char head[16] = {};
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;  // unreadable: the open says so
  const std::size_t got = std::fread(head, 1, sizeof head, f);
  std::fclose(f);
  return got < sizeof head || std::memcmp(head, "SQLite format 3", sizeof head) != 0;
}

}  // namespace

// A record read, not written: mode=ro first. A WAL record on a read-only mount cannot be opened so
// without its -shm file (SQLite must create one to read the WAL index); then it is read immutable,
// which takes the main file as it is (a record closed cleanly has all of itself there).
void Recorder::open_read_only() {
  const std::string base = "file:" + uri_path(path_) + "?mode=ro";
  for (const std::string& uri : {base, base + "&immutable=1"}) {
    sqlite3_close(db_);
    db_ = nullptr;
    if (sqlite3_open_v2(uri.c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr) != SQLITE_OK) continue;
    sqlite3_busy_timeout(db_, kBusyTimeoutMs);
    if (sqlite3_exec(db_, "SELECT COUNT(*) FROM sqlite_master", nullptr, nullptr, nullptr) == SQLITE_OK) return;
    if (sqlite3_extended_errcode(db_) != SQLITE_CANTOPEN && sqlite3_errcode(db_) != SQLITE_READONLY) return;  // said by the checks below
  }
  const std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
  sqlite3_close(db_);
  db_ = nullptr;
  throw IoError(path_.string(), "", "cannot be opened for reading: " + msg, "check the path and its permissions");
}

Recorder::Recorder(const std::filesystem::path& path, Access access) : path_(path), access_(access) {
  std::error_code ec;
  const bool existed = std::filesystem::exists(path, ec) || ec;
  if (foreign_file(path))
    throw FormatError(path.string(), "", "is not an SQLite database, so not a Mosaic record",
                      access == Access::ReadOnly ? "give a record `mosaic-cli bench`, `serve --db` or the workbench wrote"
                                                 : "give a record `mosaic-cli bench` wrote, or (to record) a path that does not exist yet");
  if (access == Access::ReadOnly) {
    if (!existed) throw MissingError(path.string(), "", "does not exist", "record runs with `mosaic-cli bench --db FILE` first");
    open_read_only();
  } else if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
    const std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw IoError(path.string(), "", "cannot be opened as a database: " + msg, "check the path and its permissions");
  }
  sqlite3_busy_timeout(db_, kBusyTimeoutMs);
  try {
    // Version and tables read in one transaction: another process creating the same file commits
    // both at once, so they are seen together or not at all.
    exec("BEGIN");
    const int version = schema_version();  // also fails here when the file is not SQLite at all
    if (version > kSchemaVersion)
      throw FormatError(path.string(), "schema version " + std::to_string(version),
                        "was written by a newer Mosaic (this one reads up to " + std::to_string(kSchemaVersion) + ")",
                        "open it with a newer build, or record to a new file");
    if (version < 0)
      throw FormatError(path.string(), "schema version " + std::to_string(version), "is not one Mosaic writes (0 to " +
                        std::to_string(kSchemaVersion) + ")", "record to a new file");
    if (version == 0) {
      Statement tables(db_, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'", path.string());
      tables.step();
      if (tables.i64(0) > 0)
        throw FormatError(path.string(), "", "is an SQLite database but not a Mosaic record (no schema version)",
                          "record to a new file");
    }
    if (version > 0) {
      // A damaged file is refused before anything is appended to it (or reported from it).
      Statement check(db_, "PRAGMA quick_check(1)", path.string());
      check.step();
      if (const std::string verdict = check.text(0); verdict != "ok")
        throw FormatError(path.string(), "", "is damaged (SQLite's quick_check: " + verdict + ")",
                          "record to a new file; `sqlite3 FILE .recover` may save what it holds");
    }
    exec("COMMIT");
    if (access == Access::ReadOnly) {
      if (version < kSchemaVersion) {
        // The older schema migrated in a copy in memory: the file stays as it is.
        sqlite3* copy = nullptr;
        if (sqlite3_open(":memory:", &copy) != SQLITE_OK) throw IoError(path.string(), "", "cannot be copied into memory to be read");
        sqlite3_backup* b = sqlite3_backup_init(copy, "main", db_, "main");
        const int rc = b ? sqlite3_backup_step(b, -1) : SQLITE_ERROR;
        sqlite3_backup_finish(b);
        sqlite3_close(db_);
        db_ = copy;
        if (rc != SQLITE_DONE) throw IoError(path.string(), "", std::string("cannot be copied into memory to be read: ") + sqlite3_errmsg(db_));
        migrate();
      }
      const auto gone = abandoned_runs();
      read_as_aborted_.insert(gone.begin(), gone.end());
      return;
    }
    // A file this process may only read (its permissions) is read as it is: since a record at rest is
    // in rollback mode again, the switch would be its first write, and fail before check_writable()
    // says why.
    if (sqlite3_db_readonly(db_, "main") != 1) set_wal_mode();
    exec("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;");
    if (version < kSchemaVersion) migrate();  // the write lock only when there is something to write: read-only files open
    try {
      mark_abandoned_runs();
    } catch (const Error&) {
      // A read-only or busy file still opens for reading; its runs keep the status they had.
    }
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close(db_);
    db_ = nullptr;
    // A file this open created (a full disk, say) is not left behind half-made.
    if (!existed)
      for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(path.string() + suffix, ec);
    throw;
  }
}

void Recorder::check_writable() const {
  if (access_ == Access::ReadOnly || sqlite3_db_readonly(db_, "main") == 1)
    throw IoError(path_.string(), "", "can only be read (its permissions, or a read-only file system)",
                  "record to a file you can write (--db), or make this one writable");
  exec("BEGIN IMMEDIATE; COMMIT;");  // the write lock: a read-only folder (no -wal file) or a stuck writer says so here
}

Recorder::~Recorder() {
  // Back to a rollback journal as the last writer closes (while another connection has the file open
  // the switch fails, and that one's close does it): a record at rest is one file, and reading it
  // read-only (runs, report, the workbench) leaves no -wal and -shm beside it.
  if (db_ && access_ == Access::ReadWrite) {
    sqlite3_busy_timeout(db_, 0);
    sqlite3_exec(db_, "PRAGMA journal_mode = DELETE", nullptr, nullptr, nullptr);
  }
  sqlite3_close(db_);
}

// Switching the journal mode needs the file to itself, and SQLite answers "database is locked" at
// once rather than through the busy handler while another process holds it (as when several
// processes open one new file): retried for as long as the busy timeout.
void Recorder::set_wal_mode() {
  using clock = std::chrono::steady_clock;
  const auto give_up = clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
  for (;;) {
    const int rc = sqlite3_exec(db_, "PRAGMA journal_mode = WAL", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return;
    if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) || clock::now() > give_up) exec("PRAGMA journal_mode = WAL");  // throws
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Each step in its own write transaction, reading the version again once the lock is held: of
// several processes opening one new file, the first migrates and the others find its version.
void Recorder::migrate() {
  for (;;) {
    exec("BEGIN IMMEDIATE");
    const int version = schema_version();
    if (version >= kSchemaVersion || version < 0) {
      exec("COMMIT");
      return;
    }
    exec(migrations()[static_cast<std::size_t>(version)] + "PRAGMA user_version = " + std::to_string(version + 1) + "; COMMIT;");
  }
}

void Recorder::exec(const std::string& sql) const {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string msg = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    if (sqlite3_get_autocommit(db_) == 0) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw IoError(path_.string(), "", "SQLite: " + msg, "is the file a Mosaic record, and is the disk full?");
  }
}

int Recorder::schema_version() const {
  Statement s(db_, "PRAGMA user_version", path_.string());
  s.step();
  return static_cast<int>(s.i64(0));
}

namespace {
std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("?");
}
// The processes this one can ask about: those of the same host and PID namespace (a container on
// the same host numbers its processes apart, so a PID from there says nothing here).
std::string process_scope() {
  std::error_code ec;
  const auto ns = std::filesystem::read_symlink("/proc/self/ns/pid", ec);  // "pid:[4026531836]"
  return ec ? host_name() : host_name() + "/" + ns.string();
}
std::string this_process() { return process_scope() + ":" + std::to_string(::getpid()); }
}  // namespace

// A run still 'running' whose recording process is gone (killed, crashed) never finishes: it is
// marked 'aborted', so that reports leave it out. One recorded on another machine or in another PID
// namespace, or by a process still alive, is left alone; one from before owners were noted has no
// process to ask and is marked. (Were its recorder, an older Mosaic, still alive after this one
// migrated the file, its finish sets the status again: finishing writes it unconditionally.)
void Recorder::mark_abandoned_runs() {
  for (std::int64_t id : abandoned_runs()) {
    Statement u(db_, "UPDATE runs SET status = 'aborted' WHERE id = ? AND status = 'running'", path_.string());
    u.bind(1, id);
    u.run();
  }
}

std::vector<std::int64_t> Recorder::abandoned_runs() const {
  Statement q(db_, "SELECT id, owner FROM runs WHERE status = 'running'", path_.string());
  std::vector<std::int64_t> gone;
  const std::string scope = process_scope();
  while (q.step()) {
    const std::string owner = q.text(1);
    const auto colon = owner.rfind(':');
    if (owner.empty()) {
      gone.push_back(q.i64(0));
      continue;
    }
    // An owner from before PID namespaces were noted ("host:pid") is judged by its host, as then.
    const std::string their = owner.substr(0, colon == std::string::npos ? 0 : colon);
    const bool same_scope = their.find('/') == std::string::npos ? their == host_name() : their == scope;
    if (colon == std::string::npos || !same_scope) continue;
    const long pid = std::strtol(owner.c_str() + colon + 1, nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) gone.push_back(q.i64(0));
  }
  return gone;
}

std::int64_t Recorder::begin_run(const std::string& strategy, const std::string& config_json) {
  Statement s(db_,
              "INSERT INTO runs (started_at, strategy, config_json, machine, build, status, owner) VALUES (?, ?, ?, ?, ?, 'running', ?)",
              path_.string());
  s.bind(1, utc_timestamp()).bind(2, strategy).bind(3, config_json).bind(4, machine_description()).bind(5, build_description());
  s.bind(6, this_process());
  s.run();
  return sqlite3_last_insert_rowid(db_);
}

void Recorder::record(std::int64_t run, const RequestRecord& r) {
  exec("BEGIN IMMEDIATE");
  try {
    Statement q(db_,
                "INSERT INTO requests (run_id, idx, target, arrival, start, first_token, finish, output_tokens, lane,"
                " prompt_tokens, outcome, error, swaps, swap_seconds, swap_bytes, preemptions)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                path_.string());
    const RequestStats& st = r.stats;
    const RuntimeCounters& c = st.counters;
    q.bind(1, run).bind(2, r.index).bind(3, r.target).bind(4, st.arrival).bind(5, st.start).bind(6, st.first_token);
    q.bind(7, st.finish).bind(8, st.generated_tokens).bind(9, static_cast<std::int64_t>(r.lane)).bind(10, st.prompt_tokens);
    q.bind(11, std::string(finish_name(r.outcome))).bind(12, r.error).bind(13, c.swaps);
    q.bind(14, c.swap_seconds).bind(15, static_cast<std::int64_t>(c.swap_bytes)).bind(16, st.preemptions);
    q.run();
    Statement l(db_,
                "INSERT INTO request_layers (run_id, idx, layer, hits, misses, loads, load_bytes, load_seconds, prefetches,"
                " prefetch_used, prefetch_bytes, prefetch_seconds, disk_loads, disk_bytes, disk_seconds)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                path_.string());
    for (std::size_t layer = 0; layer < c.layers.size(); ++layer) {
      const LayerCounts& n = c.layers[layer];
      l.bind(1, run).bind(2, r.index).bind(3, static_cast<std::int64_t>(layer)).bind(4, n.hits).bind(5, n.misses);
      l.bind(6, n.loads).bind(7, static_cast<std::int64_t>(n.load_bytes)).bind(8, n.load_seconds);
      l.bind(9, n.prefetches).bind(10, n.prefetch_used).bind(11, static_cast<std::int64_t>(n.prefetch_bytes)).bind(12, n.prefetch_seconds);
      l.bind(13, n.disk_loads).bind(14, static_cast<std::int64_t>(n.disk_bytes)).bind(15, n.disk_seconds);
      l.run();
    }
    Statement a(db_,
                "INSERT INTO request_layer_alone (run_id, idx, layer, hits, steps, attention_seconds, expert_seconds)"
                " VALUES (?,?,?,?,?,?,?)",
                path_.string());
    for (std::size_t layer = 0; layer < c.layers.size(); ++layer)
      for (std::size_t h = 0; h < c.layers[layer].alone.size(); ++h) {
        const LayerTime& t = c.layers[layer].alone[h];
        if (t.steps == 0) continue;
        a.bind(1, run).bind(2, r.index).bind(3, static_cast<std::int64_t>(layer)).bind(4, static_cast<std::int64_t>(h));
        a.bind(5, t.steps).bind(6, t.attention_seconds).bind(7, t.expert_seconds);
        a.run();
      }
    if (!r.routes.empty()) {
      Statement t(db_,
                  "INSERT INTO request_routes (run_id, idx, position, layer, expert, outcome, served_by, served_expert)"
                  " VALUES (?,?,?,?,?,?,?,?)",
                  path_.string());
      for (const RoutedExpert& e : r.routes) {
        t.bind(1, run).bind(2, r.index).bind(3, std::int64_t{e.token}).bind(4, std::int64_t{e.layer}).bind(5, std::int64_t{e.expert});
        t.bind(6, static_cast<std::int64_t>(e.outcome)).bind(7, std::int64_t{e.served_by}).bind(8, std::int64_t{e.served_expert});
        t.run();
      }
    }
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::vector<RoutedExpert> Recorder::routes(std::int64_t run, std::int64_t request) const {
  Statement s(db_,
              "SELECT position, layer, expert, outcome, served_by, served_expert FROM request_routes"
              " WHERE run_id = ? AND idx = ? ORDER BY position, layer, rowid",
              path_.string());
  s.bind(1, run).bind(2, request);
  std::vector<RoutedExpert> out;
  while (s.step()) {
    RoutedExpert e;
    e.token = static_cast<std::int32_t>(s.i64(0));
    e.layer = static_cast<std::int16_t>(s.i64(1));
    e.expert = static_cast<std::int16_t>(s.i64(2));
    e.outcome = static_cast<RoutedExpert::Outcome>(s.i64(3));
    e.served_by = static_cast<std::int16_t>(s.i64(4));
    e.served_expert = static_cast<std::int16_t>(s.i64(5));
    out.push_back(e);
  }
  return out;
}

void Recorder::sample(std::int64_t run, double t, const std::string& name, double value) {
  Statement s(db_, "INSERT INTO samples (run_id, t, name, value) VALUES (?, ?, ?, ?)", path_.string());
  s.bind(1, run).bind(2, t).bind(3, name).bind(4, value);
  s.run();
}

void Recorder::record_samples(std::int64_t run, const std::vector<Sample>& samples) {
  exec("BEGIN IMMEDIATE");
  try {
    Statement s(db_, "INSERT INTO samples (run_id, t, name, value) VALUES (?, ?, ?, ?)", path_.string());
    for (const Sample& x : samples) {
      s.bind(1, run).bind(2, x.t).bind(3, x.name).bind(4, x.value);
      s.run();
    }
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::vector<Sample> Recorder::samples(std::int64_t run, const std::string& name) const {
  Statement s(db_, "SELECT t, value FROM samples WHERE run_id = ? AND name = ? ORDER BY t, rowid", path_.string());
  s.bind(1, run).bind(2, name);
  std::vector<Sample> out;
  while (s.step()) out.push_back({s.f64(0), name, s.f64(1)});
  return out;
}

void Recorder::finish_run(std::int64_t run, const std::string& status) {
  Statement s(db_, "UPDATE runs SET finished_at = ?, status = ? WHERE id = ?", path_.string());
  s.bind(1, utc_timestamp()).bind(2, status).bind(3, run);
  s.run();
}

std::vector<RunInfo> Recorder::runs() const {
  Statement s(db_, "SELECT id, strategy, config_json, machine, build, started_at, finished_at, status FROM runs ORDER BY id",
              path_.string());
  std::vector<RunInfo> out;
  while (s.step()) out.push_back({s.i64(0), s.text(1), s.text(2), s.text(3), s.text(4), s.text(5), s.text(6), s.text(7)});
  for (RunInfo& r : out)
    if (read_as_aborted_.contains(r.id)) r.status = "aborted";
  return out;
}

std::vector<RequestRecord> Recorder::requests(std::int64_t run) const {
  std::vector<RequestRecord> out;
  {
    Statement s(db_,
                "SELECT idx, target, lane, arrival, start, first_token, finish, prompt_tokens, output_tokens, outcome, error,"
                " swaps, swap_seconds, swap_bytes, preemptions FROM requests WHERE run_id = ? ORDER BY idx",
                path_.string());
    s.bind(1, run);
    while (s.step()) {
      RequestRecord r;
      r.index = s.i64(0);
      r.target = s.text(1);
      r.lane = static_cast<std::size_t>(s.i64(2));
      RequestStats& st = r.stats;
      st.arrival = s.f64(3);
      st.start = s.f64(4);
      st.first_token = s.f64(5);
      st.finish = s.f64(6);
      st.prompt_tokens = s.i64(7);
      st.generated_tokens = s.i64(8);
      const std::string outcome = s.text(9);
      for (Finish f : {Finish::Length, Finish::Stop, Finish::Cancelled, Finish::Failed})
        if (outcome == finish_name(f)) r.outcome = f;
      r.error = s.text(10);
      st.counters.swaps = s.i64(11);
      st.counters.swap_seconds = s.f64(12);
      st.counters.swap_bytes = static_cast<std::uint64_t>(s.i64(13));
      st.preemptions = s.i64(14);
      out.push_back(std::move(r));
    }
  }
  Statement l(db_,
              "SELECT idx, layer, hits, misses, loads, load_bytes, load_seconds, prefetches, prefetch_used, prefetch_bytes,"
              " prefetch_seconds, disk_loads, disk_bytes, disk_seconds FROM request_layers WHERE run_id = ? ORDER BY idx, layer",
              path_.string());
  l.bind(1, run);
  std::size_t at = 0;
  while (l.step()) {
    while (at < out.size() && out[at].index < l.i64(0)) ++at;
    if (at == out.size() || out[at].index != l.i64(0)) continue;
    auto& layers = out[at].stats.counters.layers;
    layers.resize(std::max(layers.size(), static_cast<std::size_t>(l.i64(1)) + 1));
    layers[static_cast<std::size_t>(l.i64(1))] = {.hits = l.i64(2), .misses = l.i64(3), .loads = l.i64(4),
                                                  .load_bytes = static_cast<std::uint64_t>(l.i64(5)), .load_seconds = l.f64(6),
                                                  .prefetches = l.i64(7), .prefetch_used = l.i64(8),
                                                  .prefetch_bytes = static_cast<std::uint64_t>(l.i64(9)), .prefetch_seconds = l.f64(10),
                                                  .disk_loads = l.i64(11), .disk_bytes = static_cast<std::uint64_t>(l.i64(12)),
                                                  .disk_seconds = l.f64(13)};
  }
  Statement a(db_,
              "SELECT idx, layer, hits, steps, attention_seconds, expert_seconds FROM request_layer_alone WHERE run_id = ?"
              " ORDER BY idx, layer, hits",
              path_.string());
  a.bind(1, run);
  at = 0;
  while (a.step()) {
    while (at < out.size() && out[at].index < a.i64(0)) ++at;
    if (at == out.size() || out[at].index != a.i64(0)) continue;
    auto& layers = out[at].stats.counters.layers;
    const auto layer = static_cast<std::size_t>(a.i64(1)), hits = static_cast<std::size_t>(a.i64(2));
    if (layers.size() <= layer) layers.resize(layer + 1);
    auto& alone = layers[layer].alone;
    if (alone.size() <= hits) alone.resize(hits + 1);
    alone[hits] = {a.i64(3), a.f64(4), a.f64(5)};
  }
  return out;
}

}  // namespace mosaic
