#pragma once
// How the simulator's tokens choose their experts. Uniform top-k by default; or a routing model
// measured on real text by `mosaic-cli routing` ("mosaic.routing/1"):
//   {"schema": "mosaic.routing/1", "source": "which variant, which text",
//    "experts": E, "top_k": k, "prompt_tokens": n, "windows": w,
//    "distinct": mean distinct experts per MoE layer among a window of n tokens (measured),
//    "layer_distinct": [the same per MoE layer], "uniform_distinct": what uniform routing gives,
//    "overlap": share of consecutive token pairs whose top-k share an expert (optional),
//    "concentration": a (fitted; 0: uniform)}
// Or fitted to a published overlap alone (`mosaic-cli routing --overlap`, for a model whose weights
// this machine cannot hold): then "windows" is 0 and "distinct" is what the model predicts.
// Real routers are skewed within a prompt: its tokens keep returning to a few experts, so a prompt
// needs fewer experts at once than a uniform draw would load. The model: each (request, layer) draws
// its own preferences from a symmetric Dirichlet(a) over the experts, and each token takes k experts
// in proportion to them, without replacement. Being symmetric, it leaves every expert as popular over
// many requests as uniform routing does (a resident set's hit rate is unchanged); what falls is the
// number of experts one prompt touches, which is what a prompt's loads cost. `a` is fitted so that
// the model's expected distinct count over n tokens is the measured one.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mosaic {

struct RoutingModel {
  std::string source;
  std::int64_t experts = 0, top_k = 0, prompt_tokens = 0, windows = 0;
  double distinct = 0, uniform_distinct = 0;
  std::vector<double> layer_distinct;
  double overlap = 0;        // 0: not measured
  double concentration = 0;  // 0: uniform
};

// Throws IoError, FormatError naming the field, UnsupportedError for another schema version.
RoutingModel load_routing_model(const std::filesystem::path& path);
RoutingModel parse_routing_model(const std::string& text, const std::string& file);
std::string routing_model_json(const RoutingModel& m);  // the file's text, round-trips

// Expected distinct experts that `tokens` tokens of one (request, layer) choose: exact for uniform
// routing (concentration 0), else a Monte Carlo mean from a fixed seed (a smooth function of a).
double expected_distinct(double concentration, std::int64_t tokens, std::int64_t experts, std::int64_t top_k);
// The concentration whose expected_distinct is `distinct`: 0 when that is at least uniform's.
// Throws InvalidArgument for a count below top_k (no routing chooses fewer).
double fit_concentration(double distinct, std::int64_t tokens, std::int64_t experts, std::int64_t top_k);
// The chance that two tokens of one (request, layer) share an expert among their top-k: exact for
// uniform routing, else a Monte Carlo mean from a fixed seed. The model's tokens are exchangeable,
// so any two of a prompt share as often as neighbours do; a real router's locality fades with
// distance (the Mixtral paper's Table 5 measures neighbours), so a model fitted to a neighbour
// overlap is expected to be at least as skewed over a whole prompt as the router, touching no more
// experts (a heuristic, not a theorem: checked on the sample family, 7.09 against 7.49 measured).
double expected_overlap(double concentration, std::int64_t experts, std::int64_t top_k);
// The concentration whose expected_overlap is `overlap`: 0 when that is at most uniform's.
// Throws InvalidArgument for an overlap outside [0, 1).
double fit_concentration_to_overlap(double overlap, std::int64_t experts, std::int64_t top_k);

// The simulator's draws, from seeded keys alone, so a recomputed token routes as it did.
class SimRouter {
 public:
  SimRouter(double concentration, std::uint64_t seed, std::int64_t experts, std::int64_t top_k);
  // The k experts of `choices` (every expert, or the resident ones under masked gating) that token
  // `position` of request `request` is routed to in `layer`.
  void route(std::uint64_t request, std::int64_t position, std::int64_t layer, std::span<const int> choices, std::vector<int>& out);

 private:
  double concentration_;
  std::uint64_t seed_;
  std::int64_t experts_, top_k_;
  std::optional<std::uint64_t> cached_;  // the (request, layer) whose preferences are held
  std::vector<double> preferences_, weights_;
  std::vector<int> pool_;
};

}  // namespace mosaic
