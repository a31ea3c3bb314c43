#include "runtime/token_candidates.h"

#include <algorithm>

#include "kernels/token_candidates.h"

namespace mosaic {

std::int64_t candidate_index(std::uint64_t key) { return kernels::key_index(key); }
float candidate_logit(std::uint64_t key) { return kernels::key_logit(key); }

TokenCandidates prepare_candidates(std::span<const float> logits, double temperature, int count) {
  TokenCandidates c;
  c.vocab = static_cast<std::int64_t>(logits.size());
  c.temperature = temperature;
  c.keys.resize(static_cast<std::size_t>(count));
  std::int32_t first = 0;
  kernels::token_candidates_reference(logits.data(), 1, static_cast<int>(logits.size()), &temperature, count, &first, &c.max_logit,
                                      &c.normaliser, c.keys.data());
  c.first_max = first;
  c.keys.resize(std::min(c.keys.size(), logits.size()));
  if (temperature == 0) c.keys.clear();
  c.row = [copy = std::vector<float>(logits.begin(), logits.end())] { return copy; };
  return c;
}

}  // namespace mosaic
