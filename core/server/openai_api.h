#pragma once
// The OpenAI API's request and response bodies (completions and chat completions), apart from the
// transport: a request body becomes an ApiRequest or an ApiError with OpenAI's error shape, and
// results become response bodies and stream chunks as OpenAI's clients read them.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/sampler.h"

namespace mosaic::server {

// An error a client caused (or a refusal), as OpenAI reports it: HTTP status, error type, the
// parameter at fault.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, std::string param, const std::string& message, std::string code = {})
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)), code(std::move(code)) {}
  int status;
  std::string type, param, code;
};
ApiError bad_request(const std::string& param, const std::string& message);

// The longest `model` a request may name (a served model's id is its folder's name).
inline constexpr std::size_t kMaxModelName = 256;

struct ChatMessage {
  std::string role, content;
};

struct ApiRequest {
  bool chat = false;
  std::string model;
  std::string prompt_text;                // completions: the prompt; chat: the messages, formatted
  std::vector<std::int64_t> prompt_ids;   // completions only: a prompt given as token ids
  std::vector<ChatMessage> messages;      // chat only
  std::optional<std::int64_t> max_tokens;  // absent: 16 for completions, the context for chat
  SamplingParams sampling;               // OpenAI's defaults: temperature 1, top_p 1, a fresh seed each request
  std::vector<std::string> stop;
  bool stream = false, include_usage = false;
  bool ignore_eos = false;  // vLLM's extension: generate max_tokens whatever the model says
};

// Throws ApiError (400) naming the parameter for malformed JSON, fields of the wrong type or out of
// range (temperature in [0, 2], top_p in (0, 1], max_tokens ≥ 1, n = 1, at most 4 non-empty stops),
// and for OpenAI parameters set to something this server does not do (logprobs, echo, penalties,
// logit_bias, tools, …): a client relying on them is told, not served something else.
// `model`, when given, holds the request's `model` as soon as it is read: a refusal of a later field
// can then be counted under it.
ApiRequest parse_request(std::string_view body, bool chat, std::string* model = nullptr);

// The plain role-prefixed prompt of a chat, for models without a chat template: "role: content"
// lines, then "assistant:" for the reply.
std::string plain_chat_prompt(const std::vector<ChatMessage>& messages);

nlohmann::json error_body(const ApiError& e);

// A body as it goes on the wire. Text that is not valid UTF-8 (a stray byte token the model
// sampled, a client's bytes quoted back in an error) is sent with U+FFFD in its place, as OpenAI's
// servers do, rather than failing the response.
std::string wire(const nlohmann::json& body);

struct Usage {
  std::int64_t prompt_tokens = 0, completion_tokens = 0;
};
nlohmann::json usage_json(const Usage& u);

// `finish_reason`: "stop", "length", or null (a chunk before the last).
nlohmann::json completion_body(const ApiRequest& r, const std::string& id, std::int64_t created, const std::string& text,
                               const std::string& finish_reason, const Usage& usage);
nlohmann::json stream_chunk(const ApiRequest& r, const std::string& id, std::int64_t created, const std::string& text,
                            const std::optional<std::string>& finish_reason, bool first);
nlohmann::json usage_chunk(const ApiRequest& r, const std::string& id, std::int64_t created, const Usage& usage);

// The server-sent events of one streamed answer's text after its first: the JSON around the text
// is the same in each, so it is written once and only the text is escaped per event (what
// sse(stream_chunk(…, text, nullopt, false)) gives, for a fraction of the work per token).
class TextEvents {
 public:
  TextEvents(const ApiRequest& r, const std::string& id, std::int64_t created);
  std::string event(const std::string& text) const;  // "data: {…}\n\n"

 private:
  std::string head_, tail_;
};

}  // namespace mosaic::server
