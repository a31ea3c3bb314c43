#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "kernels/token_candidates.h"

namespace mosaic::kernels {

void token_candidates_reference(const float* logits, int rows, int vocab, const double* temperatures, int candidates,
                                std::int32_t* first_max, float* max_logit, double* normaliser, std::uint64_t* keys) {
  const int n = std::min(candidates, vocab);
  std::vector<std::uint64_t> all(static_cast<std::size_t>(vocab));
  for (int r = 0; r < rows; ++r) {
    const double t = temperatures[r];
    if (t < 0) continue;
    const float* x = logits + static_cast<std::ptrdiff_t>(r) * vocab;
    int best = -1;
    for (int i = 0; i < vocab; ++i)
      if (!std::isnan(x[i]) && (best < 0 || x[i] > x[best])) best = i;
    first_max[r] = std::max(best, 0);
    max_logit[r] = best < 0 ? -std::numeric_limits<float>::infinity() : x[best];
    if (t == 0) continue;
    double sum = 0;
    for (int i = 0; i < vocab; ++i) sum += std::exp((static_cast<double>(x[i]) - max_logit[r]) / t);
    normaliser[r] = sum;
    for (int i = 0; i < vocab; ++i) all[static_cast<std::size_t>(i)] = token_key(x[i], static_cast<std::uint32_t>(i));
    std::partial_sort(all.begin(), all.begin() + n, all.end(), std::greater<>());
    std::uint64_t* out = keys + static_cast<std::ptrdiff_t>(r) * candidates;
    std::copy(all.begin(), all.begin() + n, out);
    std::fill(out + n, out + candidates, std::uint64_t{0});
  }
}

}  // namespace mosaic::kernels
