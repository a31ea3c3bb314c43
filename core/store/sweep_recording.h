#pragma once
// A sweep recorded as it runs: events that write each run, each finished request and each run's
// time series to the recorder, then pass the event on to `next` (the printer, the charts).
#include <functional>

#include "common/error.h"
#include "serving/sweep_run.h"
#include "store/recorder.h"

namespace mosaic {

// When the recorder fails mid-sweep (the disk fills, the file goes away): without `failed` the error
// ends the sweep; with it, `failed` hears the first error, nothing more is recorded, and the runs go
// on to their results (printed, charted), so measurements already paid for are not thrown away.
SweepEvents recording(Recorder& recorder, SweepEvents next = {}, std::function<void(const Error&)> failed = {});

}  // namespace mosaic
