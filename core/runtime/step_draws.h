#pragma once
// The next token of every sequence a step produced logits for, each from its own Sampler. Rows are
// independent (a sampler, its row), so a step with enough of them draws on several threads: at 64
// sequences of a 32k vocabulary with a temperature, one thread takes ~18 ms, several steps' worth on
// a GPU (docs/benchmarks.md, "Sampling").
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "runtime/sampler.h"
#include "runtime/step.h"

namespace mosaic {

struct TokenDraw {
  Sampler* sampler = nullptr;
  std::span<const float> logits;
  const TokenCandidates* candidates = nullptr;  // drawn from these instead, where a device prepared them
  std::int64_t token = -1;  // out
};

// Chunk `chunk`'s draw from what a step returned for it: the candidates a backend prepared, else its
// first row; nullopt where it returned neither (a prompt chunk before the last).
std::optional<TokenDraw> step_draw(Sampler* sampler, const StepResult& result, std::size_t chunk);

// Logit values a step must hold (rows · vocabulary, or candidates) before its draws are spread over threads;
// below it one thread is quicker than starting others.
inline constexpr std::size_t kThreadedDrawsFrom = std::size_t{1} << 18;

// Fills every draw's token; on up to `threads` threads (0: one per core) once the rows hold at
// least `threaded_from` values. Each draw's sampler must be its own (a sequence has one row a step):
// then each is used by one thread, and the tokens are the same either way.
void draw_tokens(std::span<TokenDraw> draws, unsigned threads = 0, std::size_t threaded_from = kThreadedDrawsFrom);

}  // namespace mosaic
