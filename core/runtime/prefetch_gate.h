#pragma once
// Adaptive prefetching: whether the prefetch policy predicts a MoE layer's experts this step. A
// prediction costs the next layer's router over this layer's input, a read of its ids by the host,
// and copies that the layer's own misses queue behind: at batch 1 on the H100, where a layer's
// compute hid 15 % of a copy, prefetch ran 1.33× slower than lru with 72 % of its prefetches used.
// So a layer is judged each step it was predicted, on what the step measured:
//   - time: a used prefetch saved a demand load (this layer's average load time, else the
//     average over layers); the prefetches cost the time the step waited for them. A layer whose
//     saving, averaged over its steps, falls below that cost stops being predicted. On a backend
//     without a copy engine (the CPU) a prefetch can at best tie, so there it soon stops;
//   - hits: fewer than kUseful of its prefetched experts used, on average (also where no demand
//     load has been timed yet);
//   - nothing to load for kIdleSteps steps in a row (every predicted expert was in already).
// A stopped layer is predicted again after kProbeAfter of its steps, judged afresh. Engine thread only.
#include <cstdint>
#include <vector>

namespace mosaic {

// What one step measured at one layer (summed over its sequences).
struct PrefetchOutcome {
  std::int64_t prefetches = 0, used = 0, loads = 0;
  double prefetch_seconds = 0, load_seconds = 0;  // the waits nothing hid
};

class PrefetchGate {
 public:
  static constexpr std::int64_t kIdleSteps = 8, kProbeAfter = 32;
  static constexpr double kUseful = 0.5;  // the share of prefetched experts that must be hit
  static constexpr double kWeight = 0.25;  // of a step's measure in the moving averages

  explicit PrefetchGate(std::int64_t layers);
  // Asked once per step for each layer that could be predicted; false: it routes on its own.
  bool wanted(std::int64_t layer);
  // After the step: what it measured at each layer. Judges the layers that were predicted.
  void observe(std::int64_t layer, const PrefetchOutcome& o);
  bool on(std::int64_t layer) const;                 // as of its last step
  std::int64_t skipped() const { return skipped_; }  // predictions not made, over all layers

 private:
  struct Layer {
    std::int64_t steps = 0, off_until = 0, idle = 0;
    bool asked = false;         // predicted in the step not yet observed
    double useful = 1.0;        // moving average of used / prefetched
    double net = 0;             // moving average of seconds saved − seconds spent, per step
    double load_cost = -1;      // moving average of a demand load's seconds; < 0: none timed yet
  };
  void switch_off(Layer& l);
  double load_cost(const Layer& l) const;
  std::vector<Layer> layers_;
  double load_cost_ = -1;  // over every layer
  std::int64_t skipped_ = 0;
};

}  // namespace mosaic
