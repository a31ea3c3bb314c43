#include "sim/profile_fit.h"

#include <array>
#include <cmath>

#include "common/error.h"

namespace mosaic {

namespace {

// Weighted non-negative least squares over {launches, row-layers, 1}, by dropping the most negative
// coefficient until none is (three unknowns: exhaustive enough).
std::array<double, 3> fit_overheads(const DeviceProfile& p, const std::vector<MeasuredStep>& steps) {
  std::vector<std::array<double, 3>> x;
  std::vector<double> y, w;
  for (const MeasuredStep& m : steps) {
    const StepCost c = price_step(*m.shapes, p, m.work);
    x.push_back({c.launches, c.row_layers, 1});
    y.push_back(m.seconds - c.roofline);
    w.push_back(1 / (m.seconds * m.seconds));
  }
  std::array<bool, 3> used{true, true, true};
  for (;;) {
    std::vector<int> idx;
    for (int i = 0; i < 3; ++i)
      if (used[static_cast<std::size_t>(i)]) idx.push_back(i);
    const std::size_t n = idx.size();
    std::array<std::array<double, 4>, 3> a{};  // normal equations, augmented
    for (std::size_t s = 0; s < y.size(); ++s)
      for (std::size_t r = 0; r < n; ++r) {
        for (std::size_t c = 0; c < n; ++c) a[r][c] += w[s] * x[s][static_cast<std::size_t>(idx[r])] * x[s][static_cast<std::size_t>(idx[c])];
        a[r][3] += w[s] * x[s][static_cast<std::size_t>(idx[r])] * y[s];
      }
    for (std::size_t c = 0; c < n; ++c) {  // Gauss–Jordan with partial pivoting
      std::size_t best = c;
      for (std::size_t r = c + 1; r < n; ++r)
        if (std::abs(a[r][c]) > std::abs(a[best][c])) best = r;
      std::swap(a[c], a[best]);
      if (std::abs(a[c][c]) < 1e-300) a[c][c] = 1e-300;
      for (std::size_t r = 0; r < n; ++r)
        if (r != c) {
          const double f = a[r][c] / a[c][c];
          for (std::size_t k = c; k < 4; ++k) a[r][k] -= f * a[c][k];
        }
    }
    std::array<double, 3> out{};
    int worst = -1;
    for (std::size_t r = 0; r < n; ++r) {
      out[static_cast<std::size_t>(idx[r])] = a[r][3] / a[r][r];
      if (out[static_cast<std::size_t>(idx[r])] < 0 && (worst < 0 || out[static_cast<std::size_t>(idx[r])] < out[static_cast<std::size_t>(worst)])) worst = idx[r];
    }
    if (worst < 0 || n == 1) {
      for (double& v : out) v = std::max(0.0, v);
      return out;
    }
    used[static_cast<std::size_t>(worst)] = false;
  }
}

}  // namespace

double predicted_seconds(const DeviceProfile& p, const MeasuredStep& step) { return price_step(*step.shapes, p, step.work).seconds(); }

DeviceProfile fit_device_profile(const DeviceProfile& start, const MeasuredSteps& steps) {
  if (steps.overhead.size() < 2 || steps.bandwidth.empty() || steps.compute.empty())
    throw InvalidArgument("device fit", "measured steps",
                          "need at least two small-model steps, one bandwidth-bound and one compute-bound step");
  DeviceProfile p = start;
  for (int round = 0; round < 20; ++round) {
    const DeviceProfile before = p;
    // Launch, row and sync: least squares of (measured − roofline) = launches · launch + row-layers
    // · row + sync, each step weighted by 1/measured² so that a long prompt does not outweigh a
    // short decode step (relative error is what a prediction is judged by). A coefficient that
    // comes out negative is dropped and the rest refitted.
    const auto fitted = fit_overheads(p, steps.overhead);
    p.launch_seconds = fitted[0], p.row_seconds = fitted[1], p.sync_seconds = fitted[2];
    // Bandwidth, then peak: the rate at which the model's price of those steps is what they took
    // (the price falls as the rate grows; bisection in log space).
    auto solve = [&](const std::vector<MeasuredStep>& ms, double DeviceProfile::*rate, const char* what) {
      double measured = 0;
      for (const MeasuredStep& m : ms) measured += m.seconds - price_step(*m.shapes, p, m.work).overhead;
      auto roofline = [&](double r) {
        DeviceProfile q = p;
        q.*rate = r;
        double t = 0;
        for (const MeasuredStep& m : ms) t += price_step(*m.shapes, q, m.work).roofline;
        return t;
      };
      double lo = 1e3, hi = 1e18;  // flop/s or bytes/s
      if (measured <= roofline(hi) || measured >= roofline(lo))
        throw InvalidArgument("device fit", what,
                              "took no longer than the overhead fitted from small steps, or than the other rate allows; the machine was busy, run "
                              "bench-device again");
      for (int i = 0; i < 200 && hi / lo > 1 + 1e-9; ++i) {
        const double mid = std::sqrt(lo * hi);
        (roofline(mid) > measured ? lo : hi) = mid;
      }
      p.*rate = std::sqrt(lo * hi);
    };
    solve(steps.bandwidth, &DeviceProfile::memory_bandwidth, "bandwidth-bound steps");
    solve(steps.compute, &DeviceProfile::peak_flops, "compute-bound steps");
    const auto settled = [](double a, double b) { return std::abs(a - b) <= 1e-4 * std::abs(b); };
    if (settled(p.memory_bandwidth, before.memory_bandwidth) && settled(p.peak_flops, before.peak_flops) &&
        settled(p.launch_seconds, before.launch_seconds) && settled(p.row_seconds, before.row_seconds))
      break;
  }
  return p;
}

}  // namespace mosaic
