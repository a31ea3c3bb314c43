#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace mosaic {

std::vector<double> rope_inverse_frequencies(const ModelSpec& s) {
  const std::int64_t dim = s.rope_dim();
  const double base = s.rope_theta;
  std::vector<double> inv(static_cast<std::size_t>(dim / 2));
  for (std::size_t i = 0; i < inv.size(); ++i) inv[i] = 1.0 / std::pow(base, 2.0 * static_cast<double>(i) / static_cast<double>(dim));
  const RopeScaling& r = s.rope_scaling;
  if (r.kind == RopeKind::Yarn) {
    // _compute_yarn_parameters: dimensions that turn fewer than beta_fast times over the original
    // context keep their frequency, those turning more than beta_slow times are interpolated by the
    // factor, and a linear ramp blends the ones between.
    const double orig = static_cast<double>(r.original_max_positions);
    auto correction_dim = [&](double rotations) {
      return static_cast<double>(dim) * std::log(orig / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
    };
    double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
    if (r.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;  // no division by zero
    for (std::size_t i = 0; i < inv.size(); ++i) {
      const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
      const double extrapolated = inv[i], interpolated = inv[i] / r.factor;
      const double keep = 1.0 - ramp;  // inv_freq_extrapolation_factor
      inv[i] = interpolated * (1.0 - keep) + extrapolated * keep;
    }
  } else if (r.kind == RopeKind::Llama3) {
    // _compute_llama3_parameters: long wavelengths scaled by the factor, short ones kept, a smooth
    // blend between the two bands.
    const double old = static_cast<double>(r.original_max_positions);
    const double low_wavelen = old / r.low_freq_factor, high_wavelen = old / r.high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2 * std::numbers::pi / f;
      const double scaled = wavelen > low_wavelen ? f / r.factor : f;
      const double smooth = (old / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      const double smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
      const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
      f = medium ? smoothed : scaled;
    }
  }
  return inv;
}

}  // namespace mosaic
