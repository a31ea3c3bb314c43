#pragma once
// A device profile fitted to steps the engine ran on that device, so the cost model prices steps as
// the engine's backend takes them rather than as a datasheet says (`mosaic-cli bench-device`).
//
// The model being fitted is price_step's: per kernel the slower of bytes ÷ bandwidth and flops ÷
// peak, plus launches × launch_us, token rows × layers × row_us and one sync_us per step. Three kinds
// of measured steps pin down its five numbers: small models' steps (nearly all overhead) give
// launch, row and sync by least squares; decode steps of a larger model (bound by reading its
// weights) give the bandwidth; a long prefill (bound by its flops) gives the peak. Each depends a
// little on the others, so they are refitted in turn until they settle.
#include <string>
#include <vector>

#include "sim/device_profile.h"
#include "sim/step_cost.h"

namespace mosaic {

struct MeasuredStep {
  const ModelShapes* shapes = nullptr;
  StepWork work;
  double seconds = 0;  // as measured
  std::string label;   // what it was, for the table of residuals
};

struct MeasuredSteps {
  std::vector<MeasuredStep> overhead, bandwidth, compute;
};

// `start` supplies everything but the five fitted numbers, and the bandwidth and peak to begin from
// (micro-benchmarks). Throws InvalidArgument when a kind of step is missing, or when the overhead
// fitted from small steps leaves no time for a large step's reads or flops (small steps that cost
// more than large ones: the measurement was disturbed, run it again).
DeviceProfile fit_device_profile(const DeviceProfile& start, const MeasuredSteps& steps);

// The fitted profile's price of a measured step, for residuals.
double predicted_seconds(const DeviceProfile& p, const MeasuredStep& step);

}  // namespace mosaic
