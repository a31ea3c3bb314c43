#include "runtime/step_draws.h"

#include <algorithm>
#include <cassert>
#include <vector>

#include "common/parallel.h"

namespace mosaic {

std::optional<TokenDraw> step_draw(Sampler* sampler, const StepResult& result, std::size_t chunk) {
  if (chunk < result.candidates.size() && result.candidates[chunk].vocab > 0) return TokenDraw{sampler, {}, &result.candidates[chunk]};
  const Logits& whole = result.logits[chunk];
  if (whole.rows == 0) return std::nullopt;
  return TokenDraw{sampler, whole.row(0)};
}

void draw_tokens(std::span<TokenDraw> draws, unsigned threads, std::size_t threaded_from) {
  assert(std::all_of(draws.begin(), draws.end(), [&](const TokenDraw& d) {
    return std::count_if(draws.begin(), draws.end(), [&](const TokenDraw& e) { return e.sampler == d.sampler; }) == 1;
  }));
  // Draws from prepared candidates first, on this thread: each reads a few hundred keys. Those that
  // reach past them fetch their whole row and go with the whole rows, which are what is worth threads
  // (bench-cuda, 64 flat rows of 32k at T 0.7 drawn past their candidates on one thread: a step took
  // 89 ms, against 15 ms with the rows copied back whole and drawn on threads).
  std::vector<std::size_t> rows;
  std::size_t values = 0;
  for (std::size_t i = 0; i < draws.size(); ++i) {
    TokenDraw& d = draws[i];
    if (d.candidates)
      if (const std::optional<std::int64_t> token = d.sampler->next_within(*d.candidates)) {
        d.token = *token;
        continue;
      }
    rows.push_back(i);
    values += d.candidates ? static_cast<std::size_t>(d.candidates->vocab) : d.logits.size();
  }
  auto draw = [&](std::size_t r, unsigned) {
    TokenDraw& d = draws[rows[r]];
    d.token = d.candidates ? d.sampler->next_from_row(*d.candidates) : d.sampler->next(d.logits);
  };
  if (rows.size() < 2 || values < threaded_from) {
    for (std::size_t r = 0; r < rows.size(); ++r) draw(r, 0);
    return;
  }
  parallel_for(rows.size(), threads ? threads : thread_count(0), draw);
}

}  // namespace mosaic
