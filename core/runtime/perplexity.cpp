#include "runtime/perplexity.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace mosaic {

Perplexity perplexity(std::span<const std::int64_t> ids, std::int64_t window, std::int64_t max_windows,
                      const ScoreWindows& score) {
  if (window < 2) throw InvalidArgument("perplexity", "window", "must hold at least 2 tokens");
  const auto available = static_cast<std::int64_t>(ids.size()) / window;
  if (available == 0)
    throw InvalidArgument("perplexity", "text", "holds " + std::to_string(ids.size()) + " tokens, fewer than one window of " +
                                                   std::to_string(window), "give a longer text or a smaller --window");
  const std::int64_t count = max_windows > 0 ? std::min(available, max_windows) : available;
  std::vector<std::span<const std::int64_t>> windows;
  for (std::int64_t w = 0; w < count; ++w) {
    const std::int64_t start = (w * available / count) * window;  // evenly spread whole windows
    windows.push_back(ids.subspan(static_cast<std::size_t>(start), static_cast<std::size_t>(window)));
  }
  const std::vector<Logits> scored = score(windows);
  Perplexity p;
  double nll = 0;
  for (std::size_t w = 0; w < windows.size(); ++w) {
    const auto win = windows[w];
    for (std::int64_t i = 0; i + 1 < window; ++i) {
      const auto row = scored[w].row(i);
      const float mx = *std::max_element(row.begin(), row.end());
      double sum = 0;
      for (float v : row) sum += std::exp(static_cast<double>(v - mx));
      nll += static_cast<double>(mx) + std::log(sum) - static_cast<double>(row[static_cast<std::size_t>(win[static_cast<std::size_t>(i + 1)])]);
    }
    p.predictions += window - 1;
    ++p.windows;
  }
  p.mean_nll = nll / static_cast<double>(p.predictions);
  p.perplexity = std::exp(p.mean_nll);
  return p;
}

}  // namespace mosaic
