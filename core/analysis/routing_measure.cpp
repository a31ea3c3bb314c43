#include "analysis/routing_measure.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "common/error.h"
#include "runtime/forward.h"

namespace mosaic {

namespace {

double average(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

}  // namespace

double RoutingMeasurement::mean() const { return average(distinct); }
double RoutingMeasurement::mean_overlap() const { return average(overlap); }

std::int64_t shared_neighbours(std::span<const char> routed, std::int64_t tokens, std::int64_t experts) {
  const auto E = static_cast<std::size_t>(experts);
  std::int64_t shared = 0;
  for (std::size_t t = 0; t + 1 < static_cast<std::size_t>(tokens); ++t)
    for (std::size_t e = 0; e < E; ++e)
      if (routed[t * E + e] && routed[(t + 1) * E + e]) {
        ++shared;
        break;
      }
  return shared;
}

RoutingMeasurement measure_routing(const Model& model, std::span<const std::int64_t> ids, std::int64_t tokens, std::int64_t max_windows) {
  const ModelSpec& s = model.spec();
  if (tokens < 1 || max_windows < 1) throw InvalidArgument("routing", "window", "needs at least one token and one window");
  const auto available = static_cast<std::int64_t>(ids.size()) / tokens;
  if (available < 1)
    throw InvalidArgument("routing", "text", "holds " + std::to_string(ids.size()) + " tokens, fewer than one window of " + std::to_string(tokens),
                          "give a longer text or fewer prompt tokens");
  RoutingMeasurement m;
  m.tokens = tokens;
  m.windows = std::min(available, max_windows);
  std::vector<std::int64_t> slot(static_cast<std::size_t>(s.num_layers), -1);  // layer → index among the MoE layers
  for (std::int64_t l = 0; l < s.num_layers; ++l)
    if (s.is_sparse(l)) {
      slot[static_cast<std::size_t>(l)] = static_cast<std::int64_t>(m.layers.size());
      m.layers.push_back(l);
    }
  std::vector<double> sum(m.layers.size(), 0.0), shared(m.layers.size(), 0.0);
  // [MoE layer][token × expert]: whether the window's token was routed to the expert.
  std::vector<std::vector<char>> routed(m.layers.size());
  const auto E = static_cast<std::size_t>(s.num_experts);
  // The sink is called once per expert a layer used in the window, with the tokens routed to it.
  const ExpertInputSink sink = [&](std::int64_t layer, std::int64_t expert, std::span<const std::int64_t> rows, std::span<const float>,
                                   std::span<const float>) {
    const auto i = static_cast<std::size_t>(slot[static_cast<std::size_t>(layer)]);
    sum[i] += 1;
    for (std::int64_t t : rows) routed[i][static_cast<std::size_t>(t) * E + static_cast<std::size_t>(expert)] = 1;
  };
  for (std::int64_t w = 0; w < m.windows; ++w) {
    const std::int64_t at = (w * available / m.windows) * tokens;  // spread over the text
    for (auto& r : routed) r.assign(static_cast<std::size_t>(tokens) * E, 0);
    KvCache cache(s, 1, tokens);
    forward(model, cache, ids.subspan(static_cast<std::size_t>(at), static_cast<std::size_t>(tokens)), LogitsFor::LastPosition, nullptr, &sink);
    for (std::size_t i = 0; i < routed.size(); ++i) shared[i] += static_cast<double>(shared_neighbours(routed[i], tokens, s.num_experts));
  }
  for (double& x : sum) x /= static_cast<double>(m.windows);
  m.distinct = std::move(sum);
  const double pairs = static_cast<double>(m.windows * (tokens - 1));
  if (pairs > 0)
    for (double& x : shared) x /= pairs;
  m.overlap = std::move(shared);
  return m;
}

}  // namespace mosaic
