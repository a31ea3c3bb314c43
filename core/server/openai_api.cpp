#include "server/openai_api.h"

#include <algorithm>
#include <atomic>
#include <random>
#include <cmath>

#include "common/error.h"
#include "common/splitmix.h"
#include "common/json_fields.h"
#include "common/json_text.h"

namespace mosaic::server {
namespace {

using nlohmann::json;

constexpr std::int64_t kMaxTokens = std::int64_t{1} << 24;
constexpr std::size_t kMaxStops = 4;  // OpenAI's limit

bool has(const json& j, const char* key) { return j.contains(key) && !j.at(key).is_null(); }

// A message's content: a string, or OpenAI's list of parts of which the text parts are read.
std::string content_text(const json& c, const std::string& param) {
  if (c.is_string()) return c.get<std::string>();
  if (c.is_null()) return {};
  if (!c.is_array()) throw bad_request(param, "'" + param + "' must be a string or a list of text parts");
  std::string out;
  for (const json& part : c) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") || !part["text"].is_string())
      throw bad_request(param, "'" + param + "' holds a part that is not {\"type\": \"text\", \"text\": …}; only text is served");
    out += part["text"].get<std::string>();
  }
  return out;
}

// A seed for a request that names none: each such request draws anew, as OpenAI's do.
std::uint64_t fresh_seed() {
  static std::atomic<std::uint64_t> next{std::random_device{}() ^ (std::uint64_t{std::random_device{}()} << 32)};
  return splitmix64(next.fetch_add(0x9e3779b97f4a7c15ULL));
}

// OpenAI parameters this server does not implement, refused when set to anything but what does
// nothing, so a client relying on one is told rather than served without it.
void refuse_unserved(const json& j, bool chat) {
  auto refuse = [](const std::string& param, const std::string& what) {
    throw bad_request(param, "'" + param + "' is not served here (" + what + "); leave it out");
  };
  auto zero = [&](const char* p) {
    if (has(j, p) && !(j[p].is_number() && j[p].get<double>() == 0)) refuse(p, "penalties are not applied");
  };
  zero("presence_penalty");
  zero("frequency_penalty");
  if (has(j, "logit_bias") && !(j["logit_bias"].is_object() && j["logit_bias"].empty())) refuse("logit_bias", "no bias is applied to logits");
  if (has(j, "best_of") && !(j["best_of"].is_number_integer() && j["best_of"].get<std::int64_t>() == 1)) refuse("best_of", "one completion per request");
  if (chat) {
    if (has(j, "logprobs") && !(j["logprobs"].is_boolean() && !j["logprobs"].get<bool>())) refuse("logprobs", "no log probabilities are returned");
    if (has(j, "top_logprobs") && !(j["top_logprobs"].is_number_integer() && j["top_logprobs"].get<std::int64_t>() == 0))
      refuse("top_logprobs", "no log probabilities are returned");
    // With no tool offered, "auto" and "none" choose none: what clients send by default.
    const auto empty_list = [&](const char* p) { return !has(j, p) || (j[p].is_array() && j[p].empty()); };
    const auto no_choice = [&](const char* p) { return !has(j, p) || (j[p].is_string() && (j[p] == "none" || j[p] == "auto")); };
    if (!empty_list("tools")) refuse("tools", "no tool calls");
    if (!empty_list("functions")) refuse("functions", "no function calls");
    if (!no_choice("tool_choice")) refuse("tool_choice", "no tool calls");
    if (!no_choice("function_call")) refuse("function_call", "no function calls");
    if (has(j, "response_format")) {
      const json& f = j["response_format"];
      if (!(f.is_object() && f.contains("type") && f["type"].is_string() && f["type"] == "text"))
        refuse("response_format", "output is not constrained to a format");
    }
  } else {
    if (has(j, "logprobs")) refuse("logprobs", "no log probabilities are returned");
    if (has(j, "echo") && !(j["echo"].is_boolean() && !j["echo"].get<bool>())) refuse("echo", "the prompt is not echoed");
    if (has(j, "suffix") && !(j["suffix"].is_string() && j["suffix"].get<std::string>().empty())) refuse("suffix", "no insertion");
  }
}

json base_body(const ApiRequest& r, const std::string& id, std::int64_t created, bool chunk) {
  return {{"id", id}, {"object", r.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"}, {"created", created},
          {"model", r.model}};
}

}  // namespace

ApiError bad_request(const std::string& param, const std::string& message) {
  return ApiError(400, "invalid_request_error", param, message);
}

ApiRequest parse_request(std::string_view body, bool chat, std::string* model) {
  json j;
  try {
    j = parse_json_bounded(body, "request body");
  } catch (const Error& e) {
    throw bad_request("", std::string("the body is not accepted: ") + e.what());
  } catch (const json::exception& e) {
    throw bad_request("", std::string("the body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw bad_request("", "the body must be a JSON object");
  ApiRequest r;
  r.chat = chat;
  if (!has(j, "model") || !j["model"].is_string() || j["model"].get<std::string>().empty())
    throw bad_request("model", "'model' must name a served model (GET /v1/models lists them)");
  r.model = j["model"].get<std::string>();
  if (model) *model = r.model;
  // No served name is this long (folder names); a longer one is refused before anything keeps it.
  if (r.model.size() > kMaxModelName)
    throw bad_request("model", "'model' is " + std::to_string(r.model.size()) + " bytes long; no served model's name is longer than " +
                                   std::to_string(kMaxModelName));
  if (chat) {
    if (!has(j, "messages") || !j["messages"].is_array() || j["messages"].empty())
      throw bad_request("messages", "'messages' must be a non-empty list of {\"role\", \"content\"}");
    for (std::size_t i = 0; i < j["messages"].size(); ++i) {
      const json& m = j["messages"][i];
      const std::string at = "messages[" + std::to_string(i) + "]";
      if (!m.is_object() || !has(m, "role") || !m["role"].is_string())
        throw bad_request(at + ".role", "'" + at + ".role' must be a string (system, user, assistant)");
      r.messages.push_back({m["role"].get<std::string>(), content_text(m.contains("content") ? m["content"] : json(), at + ".content")});
    }
    r.prompt_text = plain_chat_prompt(r.messages);
  } else {
    if (!has(j, "prompt")) throw bad_request("prompt", "'prompt' is required: a string, or a list of token ids");
    const json& p = j["prompt"];
    if (p.is_string()) {
      r.prompt_text = p.get<std::string>();
    } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
      r.prompt_text = p[0].get<std::string>();
    } else if (p.is_array() && !p.empty() && std::all_of(p.begin(), p.end(), [](const json& x) { return x.is_number_integer(); })) {
      for (const json& x : p) {
        if (x.is_number_unsigned() ? x.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX) : x.get<std::int64_t>() < 0)
          throw bad_request("prompt", "'prompt' holds " + x.dump() + ", which is not a token id");
        r.prompt_ids.push_back(x.get<std::int64_t>());
      }
    } else {
      throw bad_request("prompt", "'prompt' must be a string or a list of token ids (one prompt per request: n = 1)");
    }
    if (r.prompt_text.empty() && r.prompt_ids.empty()) throw bad_request("prompt", "'prompt' is empty");
  }
  // Each parameter's problem as a 400 naming it: "'top_p' is 0; it must be a number above 0 and at most 1".
  const JsonFields f(j, [](const std::string& param, const std::string& problem, bool) { throw bad_request(param, "'" + param + "' " + problem); });
  const char* tokens_key = chat && has(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  refuse_unserved(j, chat);
  if (has(j, tokens_key)) r.max_tokens = f.integer(tokens_key, 1, kMaxTokens);
  r.sampling.temperature = has(j, "temperature") ? f.number("temperature", 0, 2) : 1.0;
  if (has(j, "top_p")) r.sampling.top_p = f.number("top_p", 0, 1, std::nullopt, /*min_open=*/true);
  if (has(j, "seed")) {
    if (!j["seed"].is_number_integer()) throw bad_request("seed", "'seed' must be a whole number");
    r.sampling.seed = j["seed"].is_number_unsigned() ? j["seed"].get<std::uint64_t>() : static_cast<std::uint64_t>(j["seed"].get<std::int64_t>());
  } else {
    r.sampling.seed = fresh_seed();
  }
  if (has(j, "n")) f.integer("n", 1, 1);  // one completion per request
  if (has(j, "stop")) {
    const json& s = j["stop"];
    if (s.is_string()) r.stop.push_back(s.get<std::string>());
    else if (s.is_array() && s.size() <= kMaxStops && std::all_of(s.begin(), s.end(), [](const json& x) { return x.is_string(); }))
      for (const json& x : s) r.stop.push_back(x.get<std::string>());
    else throw bad_request("stop", "'stop' must be a string or a list of at most 4 strings");
    if (std::any_of(r.stop.begin(), r.stop.end(), [](const std::string& x) { return x.empty(); }))
      throw bad_request("stop", "'stop' holds an empty string");
  }
  if (has(j, "stream")) {
    if (!j["stream"].is_boolean()) throw bad_request("stream", "'stream' must be true or false");
    r.stream = j["stream"].get<bool>();
  }
  // vLLM's extension, for benchmarks that need every request to run its max_tokens.
  if (has(j, "ignore_eos")) {
    if (!j["ignore_eos"].is_boolean()) throw bad_request("ignore_eos", "'ignore_eos' must be true or false");
    r.ignore_eos = j["ignore_eos"].get<bool>();
  }
  if (has(j, "stream_options")) {
    const json& so = j["stream_options"];
    if (!so.is_object()) throw bad_request("stream_options", "'stream_options' must be an object");
    if (has(so, "include_usage")) {
      if (!so["include_usage"].is_boolean()) throw bad_request("stream_options.include_usage", "'include_usage' must be true or false");
      r.include_usage = so["include_usage"].get<bool>();
    }
  }
  return r;
}

std::string wire(const json& body) { return body.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string plain_chat_prompt(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const ChatMessage& m : messages) out += m.role + ": " + m.content + "\n";
  return out + "assistant:";
}

nlohmann::json error_body(const ApiError& e) {
  return {{"error",
           {{"message", e.what()}, {"type", e.type}, {"param", e.param.empty() ? json() : json(e.param)}, {"code", e.code.empty() ? json() : json(e.code)}}}};
}

nlohmann::json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens}, {"completion_tokens", u.completion_tokens}, {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

nlohmann::json completion_body(const ApiRequest& r, const std::string& id, std::int64_t created, const std::string& text,
                               const std::string& finish_reason, const Usage& usage) {
  json b = base_body(r, id, created, false);
  json choice = {{"index", 0}, {"finish_reason", finish_reason}};
  if (r.chat) choice["message"] = {{"role", "assistant"}, {"content", text}};
  else choice["text"] = text, choice["logprobs"] = nullptr;
  b["choices"] = json::array({choice});
  b["usage"] = usage_json(usage);
  return b;
}

nlohmann::json stream_chunk(const ApiRequest& r, const std::string& id, std::int64_t created, const std::string& text,
                            const std::optional<std::string>& finish_reason, bool first) {
  json b = base_body(r, id, created, true);
  json choice = {{"index", 0}, {"finish_reason", finish_reason ? json(*finish_reason) : json()}};
  if (r.chat) {
    choice["delta"] = json::object();
    if (first) choice["delta"]["role"] = "assistant";
    if (!text.empty() || !finish_reason) choice["delta"]["content"] = text;
  } else {
    choice["text"] = text;
    choice["logprobs"] = nullptr;
  }
  b["choices"] = json::array({choice});
  return b;
}

TextEvents::TextEvents(const ApiRequest& r, const std::string& id, std::int64_t created) {
  static const std::string marker = "\x01text\x01";
  const std::string whole = wire(stream_chunk(r, id, created, marker, std::nullopt, false));
  const std::string quoted = wire(json(marker));
  const std::size_t at = whole.find(quoted);
  head_ = "data: " + whole.substr(0, at);
  tail_ = whole.substr(at + quoted.size()) + "\n\n";
}

std::string TextEvents::event(const std::string& text) const { return head_ + wire(json(text)) + tail_; }

nlohmann::json usage_chunk(const ApiRequest& r, const std::string& id, std::int64_t created, const Usage& usage) {
  json b = base_body(r, id, created, true);
  b["choices"] = json::array();
  b["usage"] = usage_json(usage);
  return b;
}

}  // namespace mosaic::server
