#include "serving/session_file.h"

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/json_text.h"
#include "common/text_file.h"

namespace mosaic {

namespace fs = std::filesystem;
using nlohmann::json;

SessionFile load_session_file(const fs::path& path) {
  const std::string file = path.string(), hint = "see sample_configs/sample-session.json";
  const json j = parse_json(read_text_file(path, hint), file, hint);
  if (!j.is_object()) throw FormatError(file, "", "is not a JSON object", hint);
  check_keys(j, {"schema", "variants", "budget_bytes", "policy", "layout", "serving", "chat"}, file, "", hint);
  if (j.contains("chat")) check_keys(j["chat"], {"target", "prompt", "max_new_tokens", "temperature", "top_p"}, file, "chat", hint);
  if (j.value("schema", std::string()) != SessionFile::kSchema)
    throw UnsupportedError(file, "schema", "is '" + j.value("schema", std::string("(missing)")) + "', not '" + SessionFile::kSchema + "'", hint);
  const fs::path base = path.parent_path();
  auto resolve = [&](const std::string& p) { return fs::path(p).is_absolute() ? fs::path(p) : (base / p).lexically_normal(); };
  SessionFile s;
  try {
    if (!j.contains("variants") || !j["variants"].is_array() || j["variants"].empty())
      throw FormatError(file, "variants", "must list the variant folders", hint);
    for (const auto& v : j["variants"]) s.variants.push_back(resolve(v.get<std::string>()));
    if (j.contains("budget_bytes") && !j["budget_bytes"].is_null()) s.budget_bytes = j["budget_bytes"].get<std::uint64_t>();
    s.policy = j.value("policy", s.policy);
    if (j.contains("layout") && j["layout"].is_string() && !j["layout"].get<std::string>().empty()) s.layout = resolve(j["layout"]);
    if (j.contains("serving") && j["serving"].is_object()) s.serving_json = j["serving"].dump();
    if (j.contains("chat") && j["chat"].is_object()) {
      s.chat_target = j["chat"].value("target", std::string());
      s.chat_prompt = j["chat"].value("prompt", std::string());
      const json& chat = j["chat"];
      if (chat.contains("max_new_tokens")) s.chat_max_new_tokens = chat["max_new_tokens"].get<int>();
      if (chat.contains("temperature")) s.chat_temperature = chat["temperature"].get<double>();
      if (chat.contains("top_p")) s.chat_top_p = chat["top_p"].get<double>();
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
  j["budget_bytes"] = s.budget_bytes ? json(*s.budget_bytes) : json(nullptr);
  if (!s.layout.empty()) j["layout"] = relative(s.layout);
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
