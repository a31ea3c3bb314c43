#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "common/error.h"
#include "kernels/token_candidates.h"

namespace mosaic {
namespace {

// The first maximum (the lowest index among equal maxima, as torch.argmax takes it for finite rows),
// found in eight independent lanes that the compiler vectorises: a vocabulary row is read once, at
// memory speed, where max_element's chain of dependent compares ran 6× slower. NaN is ignored (a row
// of NaN only gives index 0).
std::size_t first_max(std::span<const float> x) {
  constexpr std::size_t kLanes = 8;
  float lane[kLanes];
  std::fill(lane, lane + kLanes, -std::numeric_limits<float>::infinity());
  std::size_t i = 0;
  for (; i + kLanes <= x.size(); i += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
  float m = *std::max_element(lane, lane + kLanes);
  for (; i < x.size(); ++i) m = x[i] > m ? x[i] : m;
  const auto at = std::find(x.begin(), x.end(), m);
  return at == x.end() ? 0 : static_cast<std::size_t>(at - x.begin());
}

// A draw's working arrays, one set per thread rather than per sequence: 16 bytes per vocabulary entry
// (2.4 MB at Qwen2's 152k) held once per thread, and warm in the cache from one draw to the next on
// the engine's thread (a step's extra threads are new each step, and allocate theirs once).
struct Scratch {
  std::vector<std::uint64_t> keys;  // candidates as sort keys (kernels/token_candidates.h)
  std::vector<double> weights;      // [vocab]: exp((logit − max) / temperature), where computed
};
Scratch& thread_scratch() {
  thread_local Scratch s;
  return s;
}

double weight(float logit, double top, double temperature) { return std::exp((static_cast<double>(logit) - top) / temperature); }

// The row's maximum and the normaliser over the `keep` most probable, from keys in order; each
// weight also to `weights` [vocab] where given.
std::pair<double, double> top_and_sum(std::span<const std::uint64_t> keys, std::size_t keep, double temperature, double* weights = nullptr) {
  const double top = kernels::key_logit(keys[0]);
  double sum = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    const double w = weight(kernels::key_logit(keys[i]), top, temperature);
    if (weights) weights[kernels::key_index(keys[i])] = w;
    sum += w;
  }
  return {top, sum};
}

// The inverse CDF of the softmax at the temperature over the candidates in order of probability:
// top-k keeps the first `keep`, the nucleus the shortest prefix whose mass reaches top_p. `key_at(i)`
// is the i-th most probable candidate's key, or nullopt where it is not known (a device prepared
// fewer): then the draw gives nullopt. `weight_of(key)` is its weight exp((logit − max) / T), and
// `sum` the normaliser over the `keep` most probable.
template <class KeyAt, class WeightOf>
std::optional<std::int64_t> draw(const SamplingParams& p, std::size_t keep, double sum, KeyAt&& key_at, WeightOf&& weight_of,
                                 std::mt19937_64& rng) {
  // Nucleus: the shortest prefix whose mass reaches top_p (at least one token); top_p 1 keeps all.
  std::size_t n = keep;
  double total = sum;
  if (p.top_p < 1.0) {
    double mass = 0;
    total = 0;
    n = 0;
    while (n < keep) {
      const std::optional<std::uint64_t> key = key_at(n++);
      if (!key) return std::nullopt;
      const double w = weight_of(*key);
      total += w;
      mass += w / sum;
      if (mass >= p.top_p) break;
    }
  }
  double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  for (std::size_t i = 0; i < n; ++i) {
    const std::optional<std::uint64_t> key = key_at(i);
    if (!key) return std::nullopt;
    const double w = weight_of(*key);
    if (u < w) return kernels::key_index(*key);
    u -= w;
  }
  return kernels::key_index(*key_at(n - 1));  // u at the very top of the range, after rounding
}

}  // namespace

Sampler::Sampler(SamplingParams p) : params_(p), rng_(p.seed) {
  if (!(p.top_p > 0.0 && p.top_p <= 1.0))
    throw InvalidArgument("sampling", "top_p", "must be in (0, 1], got " + std::to_string(p.top_p));
  if (p.top_k < 0) throw InvalidArgument("sampling", "top_k", "must not be negative");
  if (!std::isfinite(p.temperature) || p.temperature < 0)
    throw InvalidArgument("sampling", "temperature", "must be 0 (greedy) or positive, got " + std::to_string(p.temperature));
}

// The order of the candidates is only ever needed for a prefix — a trained model's mass sits in a few
// tokens — so it is sorted lazily, a growing block at a time. Sorting the whole vocabulary for every
// token cost 5 ms at a vocabulary of 32 000 (docs/benchmarks.md, "Sampling"): twice a decode step on
// the H100.
std::int64_t Sampler::next(std::span<const float> logits) {
  if (logits.empty()) throw InvalidArgument("sampling", "logits", "are empty");
  if (params_.temperature <= 0.0) return static_cast<std::int64_t>(first_max(logits));

  Scratch& scratch = thread_scratch();
  std::vector<std::uint64_t>& keys = scratch.keys;
  std::vector<double>& weights = scratch.weights;
  keys.clear();
  keys.reserve(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) keys.push_back(kernels::token_key(logits[i], static_cast<std::uint32_t>(i)));
  std::size_t keep = keys.size();
  if (params_.top_k > 0) keep = std::min(keep, static_cast<std::size_t>(params_.top_k));
  // keys[0, sorted) is in order and before all the rest. A prefix grows 4× at a time, by a
  // selection of the next block and a sort of it only; past half of what is left, the rest is sorted.
  std::size_t sorted = 0;
  auto sort_through = [&](std::size_t n) {
    if (n <= sorted) return;
    n = std::min(keep, std::max({n, 4 * sorted, std::size_t{64}}));
    const auto from = keys.begin() + static_cast<std::ptrdiff_t>(sorted), to = keys.begin() + static_cast<std::ptrdiff_t>(n);
    if (2 * (n - sorted) > keys.size() - sorted) {
      std::sort(from, keys.end(), std::greater<>());
      sorted = keys.size();
    } else if (n - sorted <= 256) {  // a small block: a heap over one read of the rest beats a selection
      std::partial_sort(from, to, keys.end(), std::greater<>());
      sorted = n;
    } else {
      std::nth_element(from, to, keys.end(), std::greater<>());
      std::sort(from, to, std::greater<>());
      sorted = n;
    }
  };

  double sum = 0;
  const double t = params_.temperature;
  weights.resize(logits.size());
  if (keep < keys.size()) {
    sort_through(keep);
    sum = top_and_sum(keys, keep, t, weights.data()).second;
  } else {
    const double top = logits[first_max(logits)];
    for (std::size_t i = 0; i < logits.size(); ++i) sum += weights[i] = weight(logits[i], top, t);
  }
  auto key_at = [&](std::size_t i) -> std::optional<std::uint64_t> {
    sort_through(i + 1);
    return keys[i];
  };
  auto weight_of = [&](std::uint64_t key) { return weights[kernels::key_index(key)]; };
  return *draw(params_, keep, sum, key_at, weight_of, rng_);
}

// The same draw from what a device prepared. The generator advances only when the draw stays within
// the candidates; past them the draw is made again from the whole row, as if none had been prepared.
std::int64_t Sampler::next(const TokenCandidates& c) {
  if (const std::optional<std::int64_t> token = next_within(c)) return *token;
  return next_from_row(c);
}

std::int64_t Sampler::next_from_row(const TokenCandidates& c) {
  if (!c.row) throw InvalidArgument("sampling", "candidates", "need the whole row, and it cannot be fetched");
  return next(c.row());
}

std::optional<std::int64_t> Sampler::next_within(const TokenCandidates& c) {
  if (c.vocab <= 0) throw InvalidArgument("sampling", "candidates", "are empty");
  if (params_.temperature <= 0.0) return c.first_max;
  const auto vocab = static_cast<std::size_t>(c.vocab);
  const std::size_t keep = params_.top_k > 0 ? std::min(vocab, static_cast<std::size_t>(params_.top_k)) : vocab;
  const bool whole = keep == vocab;
  // The whole row's normaliser holds at the temperature it was summed at; a top-k within the
  // candidates needs only their order, which no temperature changes.
  if (!c.keys.empty() && (whole ? c.temperature == params_.temperature : keep <= c.keys.size())) {
    const auto [top, sum] = whole ? std::pair<double, double>(c.max_logit, c.normaliser) : top_and_sum(c.keys, keep, params_.temperature);
    auto key_at = [&](std::size_t i) -> std::optional<std::uint64_t> {
      if (i < c.keys.size()) return c.keys[i];
      return std::nullopt;
    };
    auto weight_of = [&, top = top](std::uint64_t key) { return weight(kernels::key_logit(key), top, params_.temperature); };
    std::mt19937_64 rng = rng_;
    if (const std::optional<std::int64_t> token = draw(params_, keep, sum, key_at, weight_of, rng)) {
      rng_ = rng;
      return *token;
    }
  }
  return std::nullopt;
}

}  // namespace mosaic
