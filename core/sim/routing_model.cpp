#include "sim/routing_model.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/json_fields.h"
#include "common/json_text.h"
#include "common/splitmix.h"
#include "common/text_file.h"

namespace mosaic {
namespace {

// Uniform doubles in (0, 1] from a key.
struct Stream {
  std::uint64_t state;
  double next() {
    state = splitmix64(state);
    return static_cast<double>((state >> 11) + 1) * 0x1.0p-53;
  }
  double normal() {  // Box–Muller
    const double u = next(), v = next();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }
};

// log of a Gamma(a, 1) draw (Marsaglia and Tsang; a < 1 boosted by U^(1/a), kept in logs because
// for small a that factor underflows).
double log_gamma_draw(double a, Stream& s) {
  double boost = 0;
  if (a < 1) {
    boost = std::log(s.next()) / a;
    a += 1;
  }
  const double d = a - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = s.normal(), t = 1.0 + c * x;
    if (t <= 0) continue;
    const double v = t * t * t, u = s.next();
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return std::log(d * v) + boost;
  }
}

const char* kRoutingHint = "measure one with mosaic-cli routing, or fit one to a published overlap with its --overlap (sample_configs/routing/ has both)";

// The concentration in [1e-3, 1e3] at which `f` (monotone in it) reaches `target`, bisecting its
// logarithm; `rising`: f grows with the concentration.
template <typename F>
double bisect_concentration(double target, bool rising, F f) {
  double lo = std::log(1e-3), hi = std::log(1e3);
  auto below = [&](double log_a) { return (f(std::exp(log_a)) < target) == rising; };  // target lies above log_a
  if (!below(lo)) return std::exp(lo);
  for (int i = 0; i < 30; ++i) {
    const double mid = 0.5 * (lo + hi);
    (below(mid) ? lo : hi) = mid;
  }
  return std::exp(0.5 * (lo + hi));
}

}  // namespace

RoutingModel load_routing_model(const std::filesystem::path& path) {
  return parse_routing_model(read_text_file(path, "check the path of the routing model; " + std::string(kRoutingHint), 1u << 20), path.string());
}

RoutingModel parse_routing_model(const std::string& text, const std::string& file) {
  const auto j = parse_json(text, file, kRoutingHint);
  if (!j.is_object()) throw FormatError(file, "", "is not a JSON object", kRoutingHint);
  check_keys(j,
             {"schema", "source", "experts", "top_k", "prompt_tokens", "windows", "distinct", "layer_distinct", "uniform_distinct", "overlap",
              "concentration"},
             file, "", kRoutingHint);
  check_schema(j, "mosaic.routing/1", file);
  const JsonFields f(j, JsonFields::format_error(file, kRoutingHint));
  constexpr std::int64_t kMaxCount = 1'000'000'000;
  RoutingModel m;
  m.source = f.text("source", false, std::string());
  m.experts = f.integer("experts", 1, kMaxCount);
  m.top_k = f.integer("top_k", 1, kMaxCount);
  m.prompt_tokens = f.integer("prompt_tokens", 1, kMaxCount);
  m.windows = f.integer("windows", 0, kMaxCount);  // 0: fitted to a published overlap, not measured
  m.concentration = f.number_from("concentration", 0, false);
  if (f.has("overlap")) m.overlap = f.number("overlap", 0, 1);  // 1 is possible: two top-k sets always meet when 2k > E
  m.distinct = f.number_from("distinct", 0, false);
  m.uniform_distinct = f.number_from("uniform_distinct", 0, false);
  if (m.top_k > m.experts) throw FormatError(file, "field 'top_k'", "is more than 'experts'", kRoutingHint);
  if (j.contains("layer_distinct")) {
    if (!j["layer_distinct"].is_array()) throw FormatError(file, "field 'layer_distinct'", "must be a list of numbers", kRoutingHint);
    for (const auto& v : j["layer_distinct"]) {
      if (!v.is_number()) throw FormatError(file, "field 'layer_distinct'", "must be a list of numbers", kRoutingHint);
      m.layer_distinct.push_back(v.get<double>());
    }
  }
  return m;
}

std::string routing_model_json(const RoutingModel& m) {
  nlohmann::ordered_json j = {{"schema", "mosaic.routing/1"},
                              {"source", m.source},
                              {"experts", m.experts},
                              {"top_k", m.top_k},
                              {"prompt_tokens", m.prompt_tokens},
                              {"windows", m.windows},
                              {"distinct", m.distinct},
                              {"layer_distinct", m.layer_distinct},
                              {"uniform_distinct", m.uniform_distinct},
                              {"overlap", m.overlap},
                              {"concentration", m.concentration}};
  if (m.overlap == 0) j.erase("overlap");
  return j.dump(2) + "\n";
}

double expected_distinct(double concentration, std::int64_t tokens, std::int64_t experts, std::int64_t top_k) {
  const double e = static_cast<double>(experts);
  if (concentration <= 0)  // each expert is missed by a token with probability 1 − k/E, independently per token
    return e * (1.0 - std::pow(1.0 - static_cast<double>(top_k) / e, static_cast<double>(tokens)));
  constexpr int kSamples = 4000;
  SimRouter router(concentration, 0x5eed, experts, top_k);
  std::vector<int> every(static_cast<std::size_t>(experts)), picked;
  for (int x = 0; x < experts; ++x) every[static_cast<std::size_t>(x)] = x;
  std::vector<char> seen(static_cast<std::size_t>(experts));
  double sum = 0;
  for (int r = 0; r < kSamples; ++r) {
    std::fill(seen.begin(), seen.end(), 0);
    for (std::int64_t t = 0; t < tokens; ++t) {
      router.route(static_cast<std::uint64_t>(r), t, 0, every, picked);
      for (int x : picked) seen[static_cast<std::size_t>(x)] = 1;
    }
    sum += static_cast<double>(std::count(seen.begin(), seen.end(), 1));
  }
  return sum / kSamples;
}

double fit_concentration(double distinct, std::int64_t tokens, std::int64_t experts, std::int64_t top_k) {
  if (!(distinct >= static_cast<double>(top_k)))
    throw InvalidArgument("routing model", "distinct experts " + std::to_string(distinct), "is fewer than top_k (" + std::to_string(top_k) + ")");
  if (distinct >= expected_distinct(0, tokens, experts, top_k)) return 0;
  return bisect_concentration(distinct, /*rising=*/true, [&](double a) { return expected_distinct(a, tokens, experts, top_k); });
}

double expected_overlap(double concentration, std::int64_t experts, std::int64_t top_k) {
  if (concentration <= 0) {  // 1 − C(E−k, k) / C(E, k): the second token's k all avoid the first's
    double apart = 1;
    for (std::int64_t i = 0; i < top_k; ++i) apart *= static_cast<double>(experts - top_k - i) / static_cast<double>(experts - i);
    return 1 - std::max(0.0, apart);
  }
  constexpr int kSamples = 20000;
  SimRouter router(concentration, 0x5eed, experts, top_k);
  std::vector<int> every(static_cast<std::size_t>(experts)), first, second;
  for (int x = 0; x < experts; ++x) every[static_cast<std::size_t>(x)] = x;
  int shared = 0;
  for (int r = 0; r < kSamples; ++r) {
    router.route(static_cast<std::uint64_t>(r), 0, 0, every, first);
    router.route(static_cast<std::uint64_t>(r), 1, 0, every, second);
    shared += std::any_of(first.begin(), first.end(), [&](int x) { return std::find(second.begin(), second.end(), x) != second.end(); });
  }
  return static_cast<double>(shared) / kSamples;
}

double fit_concentration_to_overlap(double overlap, std::int64_t experts, std::int64_t top_k) {
  if (!(overlap >= 0 && overlap < 1))
    throw InvalidArgument("routing model", "overlap " + std::to_string(overlap), "is not a share in [0, 1)", "give the share of neighbouring tokens that share an expert");
  if (overlap <= expected_overlap(0, experts, top_k)) return 0;
  return bisect_concentration(overlap, /*rising=*/false, [&](double a) { return expected_overlap(a, experts, top_k); });
}

SimRouter::SimRouter(double concentration, std::uint64_t seed, std::int64_t experts, std::int64_t top_k)
    : concentration_(concentration), seed_(seed), experts_(experts), top_k_(top_k) {}

void SimRouter::route(std::uint64_t request, std::int64_t position, std::int64_t layer, std::span<const int> choices, std::vector<int>& out) {
  std::uint64_t key = splitmix64(seed_ ^ splitmix64(request + 1) ^ splitmix64(static_cast<std::uint64_t>(position) << 20 | static_cast<std::uint64_t>(layer)));
  out.clear();
  pool_.assign(choices.begin(), choices.end());
  const auto k = std::min<std::size_t>(static_cast<std::size_t>(top_k_), pool_.size());
  if (concentration_ <= 0) {  // uniform: a partial Fisher–Yates shuffle
    for (std::size_t i = 0; i < k; ++i) {
      key = splitmix64(key);
      const std::size_t j = i + static_cast<std::size_t>(key % (pool_.size() - i));
      std::swap(pool_[i], pool_[j]);
      out.push_back(pool_[i]);
    }
    return;
  }
  const std::uint64_t prompt = splitmix64(seed_ ^ splitmix64(request + 1) ^ splitmix64(0xd1ce0000ULL | static_cast<std::uint64_t>(layer)));
  if (cached_ != prompt) {  // this (request, layer)'s preferences: Dirichlet(a) via normalized Gammas
    Stream s{prompt};
    preferences_.resize(static_cast<std::size_t>(experts_));
    for (double& p : preferences_) p = log_gamma_draw(concentration_, s);
    const double top = *std::max_element(preferences_.begin(), preferences_.end());
    for (double& p : preferences_) p = std::exp(p - top);
    cached_ = prompt;
  }
  weights_.resize(pool_.size());
  for (std::size_t i = 0; i < pool_.size(); ++i) weights_[i] = preferences_[static_cast<std::size_t>(pool_[i])];
  Stream s{key};
  for (std::size_t i = 0; i < k; ++i) {  // k in proportion to the weights, without replacement
    double total = 0;
    for (std::size_t x = i; x < pool_.size(); ++x) total += weights_[x];
    std::size_t at = pool_.size() - 1;
    if (total > 0) {
      double u = s.next() * total;
      for (std::size_t x = i; x < pool_.size(); ++x)
        if ((u -= weights_[x]) <= 0) {
          at = x;
          break;
        }
    } else {  // every remaining weight underflowed: any of them
      at = i + static_cast<std::size_t>(splitmix64(key + i) % (pool_.size() - i));
    }
    std::swap(pool_[i], pool_[at]);
    std::swap(weights_[i], weights_[at]);
    out.push_back(pool_[i]);
  }
}

}  // namespace mosaic
