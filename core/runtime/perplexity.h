#pragma once
// Held-out perplexity: exp of the mean next-token negative log-likelihood over windows of a token
// stream, each window scored from an empty KV cache by whatever forward pass the caller gives
// (one model, or the multi-variant runtime serving a target).
#include <cstdint>
#include <functional>
#include <span>

#include "runtime/forward.h"

namespace mosaic {

struct Perplexity {
  double mean_nll = 0, perplexity = 0;
  std::int64_t predictions = 0, windows = 0;
};

// All-position logits of `ids` run from an empty cache.
using ScoreWindow = std::function<Logits(std::span<const std::int64_t> ids)>;

// Windows of `window` tokens (each predicts window−1), non-overlapping; when the stream holds more
// than `max_windows` of them (> 0), that many spread evenly over it. Throws InvalidArgument when
// the stream is shorter than one window.
Perplexity perplexity(std::span<const std::int64_t> ids, std::int64_t window, std::int64_t max_windows,
                      const ScoreWindow& score);

}  // namespace mosaic
