#pragma once
// Held-out perplexity: exp of the mean next-token negative log-likelihood over windows of a token
// stream, each window scored from an empty KV cache, all windows handed over at once (the engine
// batches them).
#include <cstdint>
#include <functional>
#include <span>

#include <vector>

#include "runtime/logits.h"

namespace mosaic {

struct Perplexity {
  double mean_nll = 0, perplexity = 0;
  std::int64_t predictions = 0, windows = 0;
};

// All-position logits of each window, run from an empty cache.
using ScoreWindows = std::function<std::vector<Logits>(const std::vector<std::span<const std::int64_t>>& windows)>;

// Windows of `window` tokens (each predicts window−1), non-overlapping; when the stream holds more
// than `max_windows` of them (> 0), that many spread evenly over it. Throws InvalidArgument when
// the stream is shorter than one window.
Perplexity perplexity(std::span<const std::int64_t> ids, std::int64_t window, std::int64_t max_windows,
                      const ScoreWindows& score);

}  // namespace mosaic
