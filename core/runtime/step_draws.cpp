#include "runtime/step_draws.h"

#include <algorithm>
#include <cassert>

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
  std::size_t values = 0;
  for (const TokenDraw& d : draws) values += d.candidates ? d.candidates->keys.size() : d.logits.size();
  auto draw = [&](std::size_t i, unsigned) {
    TokenDraw& d = draws[i];
    d.token = d.candidates ? d.sampler->next(*d.candidates) : d.sampler->next(d.logits);
  };
  if (draws.size() < 2 || values < threaded_from) {
    for (std::size_t i = 0; i < draws.size(); ++i) draw(i, 0);
    return;
  }
  parallel_for(draws.size(), threads ? threads : thread_count(0), draw);
}

}  // namespace mosaic
