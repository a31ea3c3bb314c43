#include "runtime/generation.h"

#include <algorithm>
#include <chrono>

#include "common/error.h"
#include "runtime/forward.h"
#include "runtime/request_checks.h"

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
  check_request(model.spec(), req.prompt, req.max_new_tokens, "generate");
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
