#pragma once
// Picks the next token from one row of logits: greedy, or seeded temperature / top-k / top-p.
#include <cstdint>
#include <optional>
#include <random>
#include <span>

#include "runtime/token_candidates.h"

namespace mosaic {

struct SamplingParams {
  double temperature = 0.0;  // 0: greedy (the first maximum, as torch.argmax); negative is refused
  double top_p = 1.0;        // nucleus: the smallest set of tokens whose probability reaches top_p
  std::int64_t top_k = 0;    // 0: no limit
  std::uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(SamplingParams params);  // throws InvalidArgument for values out of range
  std::int64_t next(std::span<const float> logits);
  // The same token from what a device prepared (the same up to the normaliser's rounding: the device
  // sums it in another order); the whole row is fetched only when the draw reaches past the candidates.
  std::int64_t next(const TokenCandidates& candidates);
  // next(candidates) in its two parts, so that a caller can fetch the rows on several threads: the
  // draw from the candidates alone (nullopt, the generator untouched, where it reaches past them),
  // and the draw from their whole row, fetched.
  std::optional<std::int64_t> next_within(const TokenCandidates& candidates);
  std::int64_t next_from_row(const TokenCandidates& candidates);
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace mosaic
