#pragma once
// The SQLite record of QoS runs: each run with its full config, machine and build; each finished
// request with its timings, counters, per-layer hits and per-layer times of the steps it ran alone;
// time-series samples for the dashboard.
// WAL journal, one transaction per finished request, so a crash loses at most the requests in
// flight. The schema is versioned (PRAGMA user_version) and migrated forward on open; views
// (request_metrics, run_summary, layer_hit_rates, layer_latency_by_hits) make the file pleasant in the sqlite3 shell.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "serving/metrics.h"

struct sqlite3;

namespace mosaic {

struct RunInfo {
  std::int64_t id = 0;
  std::string strategy, config_json, machine, build, started_at, finished_at, status;
};

class Recorder {
 public:
  static constexpr int kSchemaVersion = 8;

  // ReadWrite opens or creates the database and migrates it to kSchemaVersion. ReadOnly (what a
  // reader such as `runs` or `report` asks for) never writes the file: it opens it with SQLite's
  // mode=ro, or immutable on a read-only mount that has no -shm file beside it; an older schema is
  // migrated in a copy in memory; runs whose recorder died read as 'aborted' without being marked.
  // Throws IoError when it cannot be opened, MissingError when a file to read does not exist,
  // FormatError when it is not a Mosaic database or was written by a newer version.
  enum class Access { ReadWrite, ReadOnly };
  explicit Recorder(const std::filesystem::path& path, Access access = Access::ReadWrite);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // For a writer, before any work: throws IoError when the file opened read-only (permissions, a
  // read-only file system) or its write lock cannot be had, naming the file and the fix.
  void check_writable() const;

  std::int64_t begin_run(const std::string& strategy, const std::string& config_json);  // status "running"
  void record(std::int64_t run, const RequestRecord& request);  // one transaction
  void sample(std::int64_t run, double t, const std::string& name, double value);
  void record_samples(std::int64_t run, const std::vector<Sample>& samples);  // one transaction
  // "finished", "stopped", "failed"; a run whose recording process died is marked "aborted" when the
  // file is next opened.
  void finish_run(std::int64_t run, const std::string& status);

  std::vector<RunInfo> runs() const;
  std::vector<RequestRecord> requests(std::int64_t run) const;  // in workload order, with per-layer counters
  // A traced run's request: its routes by position (RoutedExpert::token) and layer; empty otherwise.
  std::vector<RoutedExpert> routes(std::int64_t run, std::int64_t request) const;
  std::vector<Sample> samples(std::int64_t run, const std::string& name) const;  // in time order
  int schema_version() const;

  // The schema scripts, version by version (index 0 creates version 1); exposed so tests can build
  // a database of an older version.
  static const std::vector<std::string>& migrations();

 private:
  void exec(const std::string& sql) const;
  void set_wal_mode();
  void migrate();
  void open_read_only();
  void mark_abandoned_runs();
  std::vector<std::int64_t> abandoned_runs() const;
  std::filesystem::path path_;
  sqlite3* db_ = nullptr;
  Access access_ = Access::ReadWrite;
  std::set<std::int64_t> read_as_aborted_;  // ReadOnly: runs whose recorder is gone, not marked in the file
};

}  // namespace mosaic
