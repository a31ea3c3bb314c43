#include "serving/session_file.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/json_fields.h"
#include "common/json_text.h"
#include "common/text_file.h"

namespace mosaic {

namespace fs = std::filesystem;
using nlohmann::json;

SessionFile load_session_file(const fs::path& path) {
  return parse_session_file(read_text_file(path, "see sample_configs/sample-session.json"), path.string(), path.parent_path());
}

SessionFile parse_session_file(std::string_view text, const std::string& file, const fs::path& base) {
  const std::string hint = "see sample_configs/sample-session.json";
  const json j = parse_json(text, file, hint);
  if (!j.is_object()) throw FormatError(file, "", "is not a JSON object", hint);
  check_keys(j, {"schema", "variants", "budget_bytes", "host_budget_bytes", "policy", "shares", "layout", "reserve", "device", "cpu_weights", "serving", "chat"}, file, "", hint);
  if (j.contains("reserve")) check_keys(j["reserve"], {"context_tokens", "requests", "prefill_chunk", "miss_slots"}, file, "reserve", hint);
  if (j.contains("chat")) check_keys(j["chat"], {"target", "prompt", "max_new_tokens", "temperature", "top_p"}, file, "chat", hint);
  check_schema(j, SessionFile::kSchema, file, hint);
  auto resolve = [&](const std::string& p) { return fs::path(p).is_absolute() ? fs::path(p) : (base / p).lexically_normal(); };
  SessionFile s;
  try {
    if (!j.contains("variants") || !j["variants"].is_array() || j["variants"].empty())
      throw FormatError(file, "variants", "must list the variant folders", hint);
    for (const auto& v : j["variants"]) s.variants.push_back(resolve(v.get<std::string>()));
    if (j.contains("budget_bytes") && !j["budget_bytes"].is_null()) {
      // Read as unsigned, −5 would become 2^64 − 5.
      if (!j["budget_bytes"].is_number_unsigned()) throw FormatError(file, "budget_bytes", "must be a whole number of bytes ≥ 0", hint);
      s.budget_bytes = j["budget_bytes"].get<std::uint64_t>();
    }
    if (j.contains("host_budget_bytes") && !j["host_budget_bytes"].is_null()) {
      if (!j["host_budget_bytes"].is_number_unsigned())
        throw FormatError(file, "host_budget_bytes", "must be a whole number of bytes ≥ 0, or null (every weight in RAM)", hint);
      s.host_budget_bytes = j["host_budget_bytes"].get<std::uint64_t>();
    }
    s.policy = j.value("policy", s.policy);
    if (j.contains("shares")) {
      for (const auto& x : j["shares"]) s.shares.push_back(x.get<double>());
      if (s.shares.size() != s.variants.size() || std::any_of(s.shares.begin(), s.shares.end(), [](double x) { return !(x > 0); }))
        throw FormatError(file, "shares", "must give one positive traffic share per variant", hint);
    }
    if (j.contains("layout") && j["layout"].is_string() && !j["layout"].get<std::string>().empty()) s.layout = resolve(j["layout"]);
    if (j.contains("reserve") && j["reserve"].is_object()) {
      const JsonFields r(j["reserve"], JsonFields::format_error(file, hint), "reserve.");
      ReserveSpec spec;
      spec.context_tokens = r.integer("context_tokens", 1, std::int64_t{1} << 24, spec.context_tokens);
      spec.requests = r.integer("requests", 1, std::int64_t{1} << 20, spec.requests);
      spec.prefill_chunk = r.integer("prefill_chunk", 1, std::int64_t{1} << 20, spec.prefill_chunk);
      spec.miss_slots = r.integer("miss_slots", -1, std::int64_t{1} << 20, spec.miss_slots);
      s.reserve = spec;
    }
    if (j.contains("device")) {
      const auto d = j["device"].is_string() ? parse_device(j["device"].get<std::string>()) : std::nullopt;
      if (!d) throw FormatError(file, "device", "must be cpu or cuda", hint);
      s.device = *d;
    }
    if (j.contains("cpu_weights")) {
      const auto w = j["cpu_weights"].is_string() ? parse_cpu_weights(j["cpu_weights"].get<std::string>()) : std::nullopt;
      if (!w) throw FormatError(file, "cpu_weights", "must be stored, fp32 or mapped", hint);
      s.cpu_weights = *w;
    }
    if (j.contains("serving") && j["serving"].is_object()) s.serving_json = j["serving"].dump();
    if (j.contains("chat") && j["chat"].is_object()) {
      s.chat_target = j["chat"].value("target", std::string());
      s.chat_prompt = j["chat"].value("prompt", std::string());
      const JsonFields chat(j["chat"], JsonFields::format_error(file, hint), "chat.");
      if (chat.has("max_new_tokens")) s.chat_max_new_tokens = static_cast<int>(chat.integer("max_new_tokens", 1, std::int64_t{1} << 20));
      if (chat.has("temperature")) s.chat_temperature = chat.number_from("temperature", 0, false);
      if (chat.has("top_p")) s.chat_top_p = chat.number("top_p", 0, 1, std::nullopt, /*min_open=*/true);  // as the sampler takes it
    }
  } catch (const json::exception& e) {
    throw FormatError(file, "", std::string("has a field of the wrong type: ") + e.what(), hint);
  }
  return s;
}

void save_session_file(const fs::path& path, const SessionFile& s) {
  const fs::path base = fs::absolute(path).parent_path();
  auto relative = [&](const fs::path& p) {
    const fs::path rel = fs::absolute(p).lexically_relative(base);
    return (rel.empty() ? fs::absolute(p) : rel).generic_string();
  };
  json j = {{"schema", SessionFile::kSchema}, {"variants", json::array()}, {"policy", s.policy}};
  for (const auto& v : s.variants) j["variants"].push_back(relative(v));
  if (!s.shares.empty()) j["shares"] = s.shares;
  j["budget_bytes"] = s.budget_bytes ? json(*s.budget_bytes) : json(nullptr);
  if (s.host_budget_bytes) j["host_budget_bytes"] = *s.host_budget_bytes;
  if (!s.layout.empty()) j["layout"] = relative(s.layout);
  if (s.reserve)
    j["reserve"] = {{"context_tokens", s.reserve->context_tokens}, {"requests", s.reserve->requests},
                    {"prefill_chunk", s.reserve->prefill_chunk}, {"miss_slots", s.reserve->miss_slots}};
  if (s.device != Device::Cpu) j["device"] = std::string(device_name(s.device));
  if (s.cpu_weights != CpuWeights::Stored) j["cpu_weights"] = std::string(cpu_weights_name(s.cpu_weights));
  if (!s.serving_json.empty()) j["serving"] = json::parse(s.serving_json);
  json chat = json::object();
  if (!s.chat_target.empty()) chat["target"] = s.chat_target;
  if (!s.chat_prompt.empty()) chat["prompt"] = s.chat_prompt;
  if (s.chat_max_new_tokens) chat["max_new_tokens"] = *s.chat_max_new_tokens;
  if (s.chat_temperature) chat["temperature"] = *s.chat_temperature;
  if (s.chat_top_p) chat["top_p"] = *s.chat_top_p;
  if (!chat.empty()) j["chat"] = chat;
  write_file_atomically(path, [&](std::ostream& out) { out << j.dump(2) << "\n"; });
}

}  // namespace mosaic
