#pragma once
// Picks the next token from one row of logits: greedy, or seeded temperature / top-k / top-p.
#include <cstdint>
#include <random>
#include <span>

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
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace mosaic
