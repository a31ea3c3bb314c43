#include "store/sweep_recording.h"

namespace mosaic {

SweepEvents recording(Recorder& recorder, SweepEvents next) {
  SweepEvents e;
  e.run_started = [&recorder, next](SweepRun& run, std::size_t requests) {
    run.run_id = recorder.begin_run(run.strategy, run.config_json);
    if (next.run_started) next.run_started(run, requests);
  };
  e.request_finished = [&recorder, next](const SweepRun& run, const RequestRecord& r, std::size_t done, std::size_t total) {
    recorder.record(run.run_id, r);
    return !next.request_finished || next.request_finished(run, r, done, total);
  };
  e.run_finished = [&recorder, next](const SweepRun& run, const std::vector<RequestRecord>& records, const RunSummary& s,
                                     bool stopped) {
    recorder.record_samples(run.run_id, time_series(records));
    recorder.finish_run(run.run_id, stopped ? "stopped" : "finished");
    if (next.run_finished) next.run_finished(run, records, s, stopped);
  };
  return e;
}

}  // namespace mosaic
