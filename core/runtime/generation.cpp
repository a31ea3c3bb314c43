#include "runtime/generation.h"

#include <algorithm>
#include <chrono>

#include "common/error.h"
#include "runtime/forward.h"

namespace mosaic {

const char* finish_name(Finish f) {
  switch (f) {
    case Finish::Length: return "length";
    case Finish::Stop: return "stop";
    case Finish::Cancelled: return "cancelled";
    case Finish::Failed: return "failed";
  }
  return "?";
}

GenerationResult generate(const Model& model, const GenerationRequest& req, const TokenCallback& on_token) {
  if (req.prompt.empty()) throw InvalidArgument("generate", "prompt", "is empty", "give at least one token id");
  if (req.max_new_tokens < 0) throw InvalidArgument("generate", "max_new_tokens", "must not be negative");
  const std::int64_t context = model.spec().max_position_embeddings, prompt = static_cast<std::int64_t>(req.prompt.size());
  if (prompt > context || req.max_new_tokens > context - prompt)
    throw InvalidArgument("generate", "max_new_tokens", std::to_string(req.max_new_tokens) + " new tokens after a prompt of " +
                          std::to_string(prompt) + " pass the model's context of " + std::to_string(context) + " (max_position_embeddings)",
                          "ask for fewer tokens, or a shorter prompt");
  for (std::int64_t id : req.prompt)
    if (id < 0 || id >= model.spec().vocab_size)
      throw InvalidArgument("generate", "token id " + std::to_string(id), "is outside the vocabulary [0, " + std::to_string(model.spec().vocab_size) + ")");
  Sampler sampler(req.sampling);
  GenerationResult result;
  if (req.max_new_tokens == 0) return result;

  using clock = std::chrono::steady_clock;
  KvCache cache(model.spec(), 1, static_cast<std::int64_t>(req.prompt.size()) + req.max_new_tokens);
  auto t0 = clock::now();
  Logits logits = forward(model, cache, req.prompt, LogitsFor::LastPosition);
  result.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();

  t0 = clock::now();
  for (std::int64_t i = 0;; ++i) {
    const std::int64_t token = sampler.next(logits.row(0));
    result.tokens.push_back(token);
    const bool go_on = !on_token || on_token(token, i);
    if (std::find(req.stop_ids.begin(), req.stop_ids.end(), token) != req.stop_ids.end()) {
      result.finish = Finish::Stop;
      break;
    }
    if (!go_on) {
      result.finish = Finish::Cancelled;
      break;
    }
    if (i + 1 == req.max_new_tokens) break;
    const std::int64_t next[] = {token};
    logits = forward(model, cache, next, LogitsFor::LastPosition);
  }
  result.decode_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return result;
}

}  // namespace mosaic
