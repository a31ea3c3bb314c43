#include "runtime/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "common/error.h"

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

// A candidate as one integer that sorts (descending) most probable first, ties by the lower index,
// so that a draw does not depend on how the sort breaks ties: the logit's bits made monotonic above,
// the index inverted below.
std::uint64_t sort_key(float logit, std::size_t index) {
  const auto bits = std::bit_cast<std::uint32_t>(logit + 0.0f);  // −0 as +0: they are equal logits
  const std::uint32_t ordered = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
  return (std::uint64_t{ordered} << 32) | (0xFFFFFFFFu - static_cast<std::uint32_t>(index));
}
std::size_t index_of(std::uint64_t key) { return 0xFFFFFFFFu - static_cast<std::uint32_t>(key); }

// A draw's working arrays, one set per thread rather than per sequence: 16 bytes per vocabulary entry
// (2.4 MB at Qwen2's 152k) held once per thread, and warm in the cache from one draw to the next on
// the engine's thread (a step's extra threads are new each step, and allocate theirs once).
struct Scratch {
  std::vector<std::uint64_t> keys;  // candidates as sort keys
  std::vector<double> weights;      // [vocab]: exp((logit − max) / temperature), where computed
};
Scratch& thread_scratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

Sampler::Sampler(SamplingParams p) : params_(p), rng_(p.seed) {
  if (!(p.top_p > 0.0 && p.top_p <= 1.0))
    throw InvalidArgument("sampling", "top_p", "must be in (0, 1], got " + std::to_string(p.top_p));
  if (p.top_k < 0) throw InvalidArgument("sampling", "top_k", "must not be negative");
  if (!std::isfinite(p.temperature) || p.temperature < 0)
    throw InvalidArgument("sampling", "temperature", "must be 0 (greedy) or positive, got " + std::to_string(p.temperature));
}

// The draw is the inverse CDF of the softmax at the temperature, over the candidates in order of
// probability: top-k keeps the first k, the nucleus the shortest prefix whose mass reaches top_p.
// The order is only ever needed for a prefix — a trained model's mass sits in a few tokens — so it is
// sorted lazily, a growing block at a time. Sorting the whole vocabulary for every token cost 5 ms at
// a vocabulary of 32 000 (docs/benchmarks.md, "Sampling"): twice a decode step on the H100.
std::int64_t Sampler::next(std::span<const float> logits) {
  if (logits.empty()) throw InvalidArgument("sampling", "logits", "are empty");
  if (params_.temperature <= 0.0) return static_cast<std::int64_t>(first_max(logits));

  Scratch& scratch = thread_scratch();
  std::vector<std::uint64_t>& keys = scratch.keys;
  std::vector<double>& weights = scratch.weights;
  keys.clear();
  keys.reserve(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) keys.push_back(sort_key(logits[i], i));
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
  auto logit = [&](std::size_t i) { return logits[index_of(keys[i])]; };

  double top = 0, sum = 0;
  const double t = params_.temperature;
  auto weight = [&](float l) { return std::exp((static_cast<double>(l) - top) / t); };
  weights.resize(logits.size());
  if (keep < keys.size()) {
    sort_through(keep);
    top = logit(0);
    for (std::size_t i = 0; i < keep; ++i) sum += weights[index_of(keys[i])] = weight(logit(i));
  } else {
    top = logits[first_max(logits)];
    for (std::size_t i = 0; i < logits.size(); ++i) sum += weights[i] = weight(logits[i]);
  }
  auto weight_at = [&](std::size_t i) { return weights[index_of(keys[i])]; };  // of the i-th most probable

  // Nucleus: the shortest prefix whose mass reaches top_p (at least one token); top_p 1 keeps all.
  std::size_t n = keep;
  double total = sum;
  if (params_.top_p < 1.0) {
    double mass = 0;
    total = 0;
    n = 0;
    while (n < keep) {
      sort_through(n + 1);
      const double p = weight_at(n++);
      total += p;
      mass += p / sum;
      if (mass >= params_.top_p) break;
    }
  }
  double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (std::size_t i = 0; i < n; ++i) {
    sort_through(i + 1);
    const double p = weight_at(i);
    if (u < p) return static_cast<std::int64_t>(index_of(keys[i]));
    u -= p;
  }
  sort_through(n);
  return static_cast<std::int64_t>(index_of(keys[n - 1]));
}

}  // namespace mosaic
