#pragma once
// A sweep recorded as it runs: events that write each run, each finished request and each run's
// time series to the recorder, then pass the event on to `next` (the printer, the charts).
#include "serving/sweep_run.h"
#include "store/recorder.h"

namespace mosaic {

SweepEvents recording(Recorder& recorder, SweepEvents next = {});

}  // namespace mosaic
