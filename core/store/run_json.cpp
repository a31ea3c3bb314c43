#include "store/run_json.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace mosaic {
namespace {

using OrderedJson = nlohmann::ordered_json;

OrderedJson percentiles(const Percentiles& p) {
  return {{"p50", json_number(p.p50)}, {"p90", json_number(p.p90)}, {"p99", json_number(p.p99)}, {"mean", json_number(p.mean)}};
}

}  // namespace

OrderedJson json_number(double v) { return std::isnan(v) ? OrderedJson(nullptr) : OrderedJson(v); }

nlohmann::ordered_json summary_json(const RunSummary& s) {
  return {{"requests", s.requests},
          {"failed", s.failed},
          {"window_seconds", json_number(s.window_seconds)},
          {"drain_seconds", json_number(s.drain_seconds)},
          {"completed_in_window", s.completed_in_window},
          {"requests_per_minute", json_number(s.requests_per_minute)},
          {"tokens_per_second", json_number(s.tokens_per_second)},
          {"ttft_seconds", percentiles(s.ttft)},
          {"turnaround_seconds", percentiles(s.turnaround)},
          {"queue_wait_seconds", percentiles(s.queue_wait)},
          {"tpot_seconds", percentiles(s.tpot)},
          {"hit_rate", json_number(s.hit_rate)},
          {"swaps", s.swaps},
          {"preemptions", s.preemptions},
          {"swap_seconds", json_number(s.swap_seconds)},
          {"swap_bytes", s.swap_bytes},
          {"load_bytes", s.load_bytes},
          {"loads", s.loads},
          {"disk_loads", s.disk_loads},
          {"disk_seconds", json_number(s.disk_seconds)}};
}

}  // namespace mosaic
