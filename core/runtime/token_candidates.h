#pragma once
// A row's draw as a device prepares it (kernels/token_candidates.h): the first maximum, the
// softmax's normaliser at the row's temperature and the most probable tokens in order. The Sampler
// finishes the draw from these and fetches the whole row only when the draw reaches past them, so a
// step copies back a few KB a row instead of the vocabulary.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace mosaic {

struct TokenCandidates {
  std::int64_t vocab = 0;  // 0: nothing prepared (the row came back whole)
  std::int64_t first_max = 0;
  float max_logit = 0;
  double temperature = 0;  // what the normaliser and keys were prepared at; 0: greedy, only first_max
  double normaliser = 0;   // Σ exp((logit − max_logit) / temperature) over the whole row
  std::vector<std::uint64_t> keys;  // the most probable tokens, most probable first (candidate_index/logit)
  // The whole row, fetched from where it was prepared; callable until that backend's next step.
  std::function<std::vector<float>()> row;
};

std::int64_t candidate_index(std::uint64_t key);
float candidate_logit(std::uint64_t key);

// The same, prepared on the host by the kernel's CPU reference (tests, and backends without the
// kernel); `row` returns a copy of `logits`.
TokenCandidates prepare_candidates(std::span<const float> logits, double temperature, int count);

}  // namespace mosaic
