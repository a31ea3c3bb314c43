#include "store/sweep_recording.h"

#include <atomic>
#include <memory>

namespace mosaic {

SweepEvents recording(Recorder& recorder, SweepEvents next, std::function<void(const Error&)> failed) {
  // Runs one recorder call unless recording has already failed; the first failure goes to `failed`.
  auto broken = std::make_shared<std::atomic<bool>>(false);
  auto record = [broken, failed](auto&& write) {
    if (broken->load()) return;
    try {
      write();
    } catch (const Error& e) {
      if (!failed) throw;
      if (!broken->exchange(true)) failed(e);
    }
  };
  SweepEvents e;
  e.rates_chosen = next.rates_chosen;  // recorded with each run's config
  e.probe_progress = next.probe_progress;  // a burst records nothing of its own
  e.run_started = [&recorder, next, record](SweepRun& run, std::size_t requests) {
    record([&] { run.run_id = recorder.begin_run(run.strategy, run.config_json); });
    if (next.run_started) next.run_started(run, requests);
  };
  e.request_finished = [&recorder, next, record](const SweepRun& run, const RequestRecord& r, std::size_t done, std::size_t total) {
    if (run.run_id > 0) record([&] { recorder.record(run.run_id, r); });
    return !next.request_finished || next.request_finished(run, r, done, total);
  };
  e.run_finished = [&recorder, next, record](const SweepRun& run, const std::vector<RequestRecord>& records, const RunSummary& s,
                                             bool stopped) {
    if (run.run_id > 0)
      record([&] {
        recorder.record_samples(run.run_id, time_series(records));
        recorder.finish_run(run.run_id, stopped ? "stopped" : "finished");
      });
    if (next.run_finished) next.run_finished(run, records, s, stopped);
  };
  return e;
}

}  // namespace mosaic
