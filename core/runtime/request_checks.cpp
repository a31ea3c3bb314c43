#include "runtime/request_checks.h"

#include "common/error.h"

namespace mosaic {

void check_request(const ModelSpec& s, std::span<const std::int64_t> ids, std::int64_t max_new_tokens, const std::string& who,
                   const std::string& new_tokens) {
  if (ids.empty()) throw InvalidArgument(who, "prompt", "is empty", "give at least one token id");
  for (std::int64_t id : ids)
    if (id < 0 || id >= s.vocab_size)
      throw InvalidArgument(who, "token id " + std::to_string(id), "is outside the vocabulary [0, " + std::to_string(s.vocab_size) + ")");
  if (max_new_tokens < 0) throw InvalidArgument(who, new_tokens, "is " + std::to_string(max_new_tokens) + ": must not be negative", "ask for 0 or more");
  const std::int64_t context = s.max_position_embeddings, prompt = static_cast<std::int64_t>(ids.size());
  if (prompt > context)
    throw InvalidArgument(who, "prompt", "is " + std::to_string(prompt) + " tokens, longer than the model's context of " +
                          std::to_string(context) + " (max_position_embeddings)", "shorten the prompt");
  if (max_new_tokens > context - prompt)
    throw InvalidArgument(who, new_tokens, std::to_string(max_new_tokens) + " new tokens after a prompt of " +
                          std::to_string(prompt) + " pass the model's context of " + std::to_string(context) + " (max_position_embeddings)",
                          "ask for at most " + std::to_string(context - prompt));
}

}  // namespace mosaic
