#pragma once
// A generation request, how one ends, and the single-model reference loop (prefill the prompt, then
// decode token by token over runtime/forward.h) that the engine's batched serving is checked against.
#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/forward.h"
#include "runtime/model.h"
#include "runtime/sampler.h"

namespace mosaic {

struct GenerationRequest {
  std::vector<std::int64_t> prompt;
  std::int64_t max_new_tokens = 32;
  SamplingParams sampling;
  std::vector<std::int64_t> stop_ids;  // generation ends after emitting one of these
};

enum class Finish { Length, Stop, Cancelled, Failed };  // Cancelled is an outcome, not an error
const char* finish_name(Finish f);  // "length", "stop", "cancelled", "failed"

struct GenerationResult {
  std::vector<std::int64_t> tokens;  // generated ids only, the stop id included
  Finish finish = Finish::Length;
  double prefill_seconds = 0, decode_seconds = 0;
};

// Called with each new token and its index among the generated ones; returning false cancels.
using TokenCallback = std::function<bool(std::int64_t token, std::int64_t index)>;

// The reference: one sequence through one checkpoint's Model.
GenerationResult generate(const Model& model, const GenerationRequest& request, const TokenCallback& on_token = {});

}  // namespace mosaic
