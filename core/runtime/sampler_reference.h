#pragma once
// Sampler's draw written the plain way: the whole row sorted for every token. The Sampler sorts only
// the prefix a draw reaches; from the same seed both take the same tokens (tst_generation checks it)
// up to rounding: without top-k the Sampler sums the softmax's normaliser in index order, this in
// order of probability, so a draw within an ulp of a boundary could differ. bench-forward measures
// the Sampler against this.
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "runtime/sampler.h"

namespace mosaic {

class FullSortSampler {
 public:
  explicit FullSortSampler(SamplingParams params) : params_(params), rng_(params.seed) {}
  std::int64_t next(std::span<const float> logits);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, std::int64_t>> sorted_;
  std::vector<double> weights_;
};

}  // namespace mosaic
