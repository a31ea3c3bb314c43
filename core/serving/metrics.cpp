#include "serving/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mosaic {

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto rank = [&](double q) {  // nearest rank: the smallest value with at least q of the sample at or below it
    const auto k = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::clamp<std::size_t>(k, 1, v.size()) - 1];
  };
  p.p50 = rank(0.50);
  p.p90 = rank(0.90);
  p.p99 = rank(0.99);
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / static_cast<double>(v.size());
  return p;
}

RunSummary summarize(const std::vector<RequestRecord>& records) {
  RunSummary s;
  std::vector<double> ttft, turnaround, wait, tpot;
  std::vector<std::int64_t> hits, misses;
  double first = std::numeric_limits<double>::infinity(), last = 0;
  for (const RequestRecord& r : records) {
    ++s.requests;
    const RequestStats& q = r.stats;
    const RuntimeCounters& c = q.counters;
    first = std::min(first, q.arrival);
    last = std::max(last, q.finish);
    s.swaps += c.swaps;
    s.swap_seconds += c.swap_seconds;
    s.swap_bytes += c.swap_bytes;
    s.preemptions += q.preemptions;
    const LayerCounts t = c.total();
    s.load_seconds += t.load_seconds;
    s.load_bytes += t.load_bytes;
    s.loads += t.loads;
    s.disk_loads += t.disk_loads;
    s.disk_seconds += t.disk_seconds;
    hits.resize(std::max(hits.size(), c.layers.size()));
    misses.resize(hits.size());
    for (std::size_t l = 0; l < c.layers.size(); ++l) {
      hits[l] += c.layers[l].hits;
      misses[l] += c.layers[l].misses;
    }
    if (r.outcome == Finish::Failed) {
      ++s.failed;
      continue;
    }
    s.output_tokens += q.generated_tokens;
    wait.push_back(q.queue_wait());
    turnaround.push_back(q.turnaround());
    if (q.generated_tokens > 0) ttft.push_back(q.ttft());
    if (q.generated_tokens > 1) tpot.push_back(q.tpot());
  }
  s.makespan_seconds = s.requests ? last - first : 0;
  double window = 0;
  for (const RequestRecord& r : records) window = std::max(window, r.stats.arrival);
  std::int64_t tokens_in_window = 0;
  for (const RequestRecord& r : records)
    if (r.outcome != Finish::Failed && r.stats.finish <= window) {
      ++s.completed_in_window;
      tokens_in_window += r.stats.generated_tokens;
    }
  s.window_seconds = window;
  s.drain_seconds = s.requests ? std::max(0.0, last - window) : 0;
  if (window > 0) {
    s.requests_per_minute = 60.0 * static_cast<double>(s.completed_in_window) / window;
    s.tokens_per_second = static_cast<double>(tokens_in_window) / window;
  }
  s.ttft = percentiles(ttft);
  s.turnaround = percentiles(turnaround);
  s.queue_wait = percentiles(wait);
  s.tpot = percentiles(tpot);
  std::int64_t all_hits = 0, all = 0;
  for (std::size_t l = 0; l < hits.size(); ++l) {
    const std::int64_t n = hits[l] + misses[l];
    s.hit_rate_per_layer.push_back(n ? static_cast<double>(hits[l]) / static_cast<double>(n) : std::nan(""));
    all_hits += hits[l];
    all += n;
  }
  s.hit_rate = all ? static_cast<double>(all_hits) / static_cast<double>(all) : std::nan("");
  return s;
}

std::vector<Sample> time_series(const std::vector<RequestRecord>& records) {
  struct Event {
    double t;
    int delta;  // +1 arrival, -1 finish
    double turnaround;
  };
  std::vector<Event> events;
  for (const RequestRecord& r : records) {
    events.push_back({r.stats.arrival, +1, 0});
    events.push_back({r.stats.finish, -1, r.stats.turnaround()});
  }
  // Finishes before arrivals at the same instant, so the count never overshoots.
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return a.t < b.t || (a.t == b.t && a.delta < b.delta);
  });
  std::vector<Sample> out;
  std::int64_t in_system = 0, completed = 0;
  for (const Event& e : events) {
    in_system += e.delta;
    out.push_back({e.t, "in_system", static_cast<double>(in_system)});
    if (e.delta < 0) {
      out.push_back({e.t, "completed", static_cast<double>(++completed)});
      out.push_back({e.t, "turnaround", e.turnaround});
    }
  }
  return out;
}

}  // namespace mosaic
