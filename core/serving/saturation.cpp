#include "serving/saturation.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace mosaic {
namespace {
constexpr double kRounding = 5e-3;  // the grid's rates keep three significant digits
}  // namespace

std::size_t burst_size(const SaturationRates& spec, std::int64_t max_sequences, std::size_t partitions) {
  if (spec.probe_requests > 0) return static_cast<std::size_t>(spec.probe_requests);
  const double fill = 4.0 * static_cast<double>(std::max<std::int64_t>(max_sequences, 1)) * static_cast<double>(std::max<std::size_t>(partitions, 1));
  return static_cast<std::size_t>(std::clamp(fill, 32.0, 4096.0));
}

std::vector<WorkloadRequest> burst_workload(const SweepConfig& config, const std::vector<std::string>& targets, std::int64_t vocab_size,
                                            std::size_t n) {
  WorkloadSpec spec = config.workload;
  spec.targets = targets;
  spec.vocab_size = vocab_size;
  spec.seed = config.workload.seed ^ 0x5a7ull << 40;  // apart from every repeat's seed (seed + repeat)
  // Twice the count expected in the window, so that the Poisson draw almost surely holds n; the
  // burst is its first n, all arriving at once.
  spec.total_rate = 2.0 * static_cast<double>(n) / std::max(spec.duration_seconds, 1e-9);
  std::vector<WorkloadRequest> w = generate_workload(spec);
  for (int extra = 1; w.size() < n && extra < 8; ++extra) {  // an unlucky draw: ask for more
    spec.total_rate *= 2;
    w = generate_workload(spec);
  }
  if (w.size() > n) w.resize(n);
  for (WorkloadRequest& r : w) r.arrival = 0;
  return w;
}

SaturationProbe saturation_probe(const std::string& strategy, const std::vector<RequestRecord>& records) {
  std::vector<double> finishes;
  for (const RequestRecord& r : records) {
    if (!r.error.empty())
      throw InvalidArgument("saturation probe", "strategy " + strategy, "failed a request of its burst: " + r.error,
                            "fix what the error says, or give the sweep fixed rates");
    finishes.push_back(r.stats.finish);
  }
  std::sort(finishes.begin(), finishes.end());
  SaturationProbe p{strategy, records.size(), finishes.empty() ? 0 : finishes.back(), 0};
  const std::size_t n = finishes.size();
  if (n >= 8) {
    const std::size_t a = n / 4, b = 3 * n / 4;
    const double span = finishes[b] - finishes[a];
    // A middle half that finished in one step (a single batch): fall back to the whole burst.
    p.rate_per_s = span > 0 ? static_cast<double>(b - a) / span : 0;
  }
  if (p.rate_per_s <= 0 && p.seconds > 0) p.rate_per_s = static_cast<double>(n) / p.seconds;
  return p;
}

std::vector<double> saturation_sweep_rates(const SaturationRates& spec, double duration_seconds,
                                           const std::vector<SaturationProbe>& probes) {
  double slowest = 0, fastest = 0;
  for (const SaturationProbe& p : probes) {
    if (!(p.rate_per_s > 0) || !std::isfinite(p.rate_per_s))
      throw InvalidArgument("saturation probe", "strategy " + p.strategy, "measured no service time (" + std::to_string(p.requests) +
                                                                            " requests in " + std::to_string(p.seconds) + " s)");
    slowest = slowest > 0 ? std::min(slowest, p.rate_per_s) : p.rate_per_s;
    fastest = std::max(fastest, p.rate_per_s);
  }
  if (probes.empty()) throw InvalidArgument("saturation probe", "strategies", "are none: nothing to measure");
  const double lo = spec.from * slowest, hi = spec.to * fastest;
  std::vector<double> rates;
  for (int i = 0; i < spec.points; ++i) {
    const double t = spec.points > 1 ? static_cast<double>(i) / (spec.points - 1) : 0.0;
    // Three significant digits: rates read back from the record and group into points by value.
    const double r = lo * std::pow(hi / lo, t);
    const double scale = std::pow(10.0, std::floor(std::log10(r)) - 2);
    rates.push_back(std::round(r / scale) * scale);
  }
  constexpr double kMaxRequests = 1000000;  // as the config's own check of fixed rates
  if (rates.back() * duration_seconds > kMaxRequests)
    throw InvalidArgument("sweep config", "rates.saturation",
                          "chose " + std::to_string(rates.back()) + " req/s, about " + std::to_string(rates.back() * duration_seconds) +
                              " requests in a run (more than " + std::to_string(static_cast<long long>(kMaxRequests)) + ")",
                          "shorten duration_seconds or lower 'to'");
  return rates;
}

std::vector<double> strategy_rates(const std::vector<double>& grid, const SaturationRates& spec, const SaturationProbe& probe) {
  std::vector<double> rates;
  for (double r : grid) {
    rates.push_back(r);
    if (r >= spec.to * probe.rate_per_s * (1 - kRounding)) break;  // the fastest's top rate, rounded down, counts
  }
  return rates;
}

nlohmann::json saturation_json(const std::vector<SaturationProbe>& probes) {
  nlohmann::json j = nlohmann::json::array();
  for (const SaturationProbe& p : probes)
    j.push_back({{"strategy", p.strategy}, {"rate_per_s", p.rate_per_s}, {"requests", p.requests}, {"seconds", p.seconds}});
  return j;
}

}  // namespace mosaic
