#include "analysis/routing_measure.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "common/error.h"
#include "runtime/forward.h"

namespace mosaic {

double RoutingMeasurement::mean() const {
  return distinct.empty() ? 0.0 : std::accumulate(distinct.begin(), distinct.end(), 0.0) / static_cast<double>(distinct.size());
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
  std::vector<double> sum(m.layers.size(), 0.0);
  // The sink is called once per expert a layer used in the window.
  const ExpertInputSink sink = [&](std::int64_t layer, std::int64_t, std::span<const float>, std::span<const float>) {
    sum[static_cast<std::size_t>(slot[static_cast<std::size_t>(layer)])] += 1;
  };
  for (std::int64_t w = 0; w < m.windows; ++w) {
    const std::int64_t at = (w * available / m.windows) * tokens;  // spread over the text
    KvCache cache(s, 1, tokens);
    forward(model, cache, ids.subspan(static_cast<std::size_t>(at), static_cast<std::size_t>(tokens)), LogitsFor::LastPosition, nullptr, &sink);
  }
  for (double& x : sum) x /= static_cast<double>(m.windows);
  m.distinct = std::move(sum);
  return m;
}

}  // namespace mosaic
