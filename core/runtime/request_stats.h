#pragma once
// What serving one request cost and measured: the one stats type of the engine, the QoS runner, the
// recorder, the command line and the workbench.
#include <cstdint>
#include <vector>

#include "runtime/step.h"

namespace mosaic {

struct RuntimeCounters {
  std::vector<LayerCounts> layers;  // [num_layers]; dense layers stay zero
  std::int64_t swaps = 0;           // resident-set swaps made for this request
  std::uint64_t swap_bytes = 0;
  double swap_seconds = 0;

  LayerCounts total() const;
};

struct RequestStats {
  // Seconds on the engine's clock (a virtual clock for simulated arrivals).
  double arrival = 0, start = 0, first_token = 0, finish = 0;
  std::int64_t prompt_tokens = 0, generated_tokens = 0;
  std::int64_t preemptions = 0;  // times its KV blocks were taken back and it was recomputed
  RuntimeCounters counters;

  double queue_wait() const { return start - arrival; }   // arrival → first scheduled
  double ttft() const { return first_token - arrival; }   // arrival → first token
  double turnaround() const { return finish - arrival; }  // arrival → finished
  // Mean time per output token after the first.
  double tpot() const {
    return generated_tokens > 1 ? (finish - first_token) / static_cast<double>(generated_tokens - 1) : 0;
  }
  double swap_seconds() const { return counters.swap_seconds; }
  std::uint64_t bytes_moved() const {
    const LayerCounts t = counters.total();
    return counters.swap_bytes + t.load_bytes + t.prefetch_bytes;
  }
};

}  // namespace mosaic
