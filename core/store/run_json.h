#pragma once
// A run's summary as JSON, for `bench --json` and report.json alike: times in seconds with the unit
// in each key, rates as fractions, NaN as null.
#include <nlohmann/json_fwd.hpp>

#include "serving/metrics.h"

namespace mosaic {

nlohmann::ordered_json summary_json(const RunSummary& s);

// `v`, or null for NaN (a figure with nothing to measure).
nlohmann::ordered_json json_number(double v);

}  // namespace mosaic
