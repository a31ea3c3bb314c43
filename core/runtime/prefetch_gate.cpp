#include "runtime/prefetch_gate.h"

#include <algorithm>

namespace mosaic {

namespace {
double blend(double average, double sample, double weight) { return average < 0 ? sample : (1 - weight) * average + weight * sample; }
}  // namespace

PrefetchGate::PrefetchGate(std::int64_t layers) : layers_(static_cast<std::size_t>(std::max<std::int64_t>(layers, 0))) {}

bool PrefetchGate::wanted(std::int64_t layer) {
  if (layer < 0 || static_cast<std::size_t>(layer) >= layers_.size()) return true;
  Layer& l = layers_[static_cast<std::size_t>(layer)];
  ++l.steps;
  l.asked = l.steps >= l.off_until;
  if (!l.asked) ++skipped_;
  return l.asked;
}

void PrefetchGate::switch_off(Layer& l) {
  l.off_until = l.steps + kProbeAfter;
  // The probe is judged on its own step: a prediction that pays then turns the layer back on.
  l.idle = 0;
  l.useful = 1.0;
  l.net = 0;
}

double PrefetchGate::load_cost(const Layer& l) const { return l.load_cost >= 0 ? l.load_cost : load_cost_; }

void PrefetchGate::observe(std::int64_t layer, const PrefetchOutcome& o) {
  if (layer < 0 || static_cast<std::size_t>(layer) >= layers_.size()) return;
  Layer& l = layers_[static_cast<std::size_t>(layer)];
  if (o.loads > 0) {  // what a miss costs here, with or without a prediction
    const double each = o.load_seconds / static_cast<double>(o.loads);
    l.load_cost = blend(l.load_cost, each, kWeight);
    load_cost_ = blend(load_cost_, each, kWeight);
  }
  if (!l.asked) return;
  l.asked = false;
  if (o.prefetches <= 0) {
    if (++l.idle >= kIdleSteps) switch_off(l);
    return;
  }
  l.idle = 0;
  const double share = std::min(1.0, static_cast<double>(o.used) / static_cast<double>(o.prefetches));
  l.useful = (1 - kWeight) * l.useful + kWeight * share;
  bool pays = l.useful >= kUseful;
  const double cost = load_cost(l);
  if (cost >= 0) {
    l.net = (1 - kWeight) * l.net + kWeight * (static_cast<double>(o.used) * cost - o.prefetch_seconds);
    pays = pays && l.net >= 0;
  }
  if (!pays) switch_off(l);
}

bool PrefetchGate::on(std::int64_t layer) const {
  if (layer < 0 || static_cast<std::size_t>(layer) >= layers_.size()) return true;
  const Layer& l = layers_[static_cast<std::size_t>(layer)];
  return l.steps >= l.off_until;
}

}  // namespace mosaic
