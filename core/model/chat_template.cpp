#include "model/chat_template.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/jinja/ast.h"
#include "model/jinja/render.h"

namespace mosaic {

struct ChatTemplate::Program {
  jinja::Body body;
};

ChatTemplate ChatTemplate::parse(const std::string& text, const std::string& source, std::string bos_token, std::string eos_token) {
  ChatTemplate t;
  auto p = std::make_shared<Program>();
  p->body = jinja::parse(text, source);
  t.program_ = std::move(p);
  t.source_ = source;
  t.bos_ = std::move(bos_token);
  t.eos_ = std::move(eos_token);
  return t;
}

namespace {

// tokenizer_config.json gives special tokens as strings or as {"content": …} (AddedToken).
std::string token_text(const nlohmann::json& cfg, const char* key) {
  if (!cfg.contains(key)) return {};
  const auto& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return {};
}

}  // namespace

std::optional<ChatTemplate> ChatTemplate::load(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / "tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return std::nullopt;
  std::ifstream in(file, std::ios::binary);
  if (!in) throw IoError(file.string(), "", "cannot be read", "check its permissions");
  std::stringstream text;
  text << in.rdbuf();
  const auto cfg = nlohmann::json::parse(text.str(), nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object())
    throw FormatError(file.string(), "", "is not a JSON object", "restore the file from the model's repository");
  if (!cfg.contains("chat_template") || cfg["chat_template"].is_null()) return std::nullopt;
  const auto& t = cfg["chat_template"];
  std::string body;
  if (t.is_string()) {
    body = t.get<std::string>();
  } else if (t.is_array()) {  // named templates: the "default" one serves chat
    for (const auto& named : t)
      if (named.is_object() && named.contains("name") && named["name"] == "default" && named.contains("template") && named["template"].is_string())
        body = named["template"].get<std::string>();
    if (body.empty()) throw FormatError(file.string(), "chat_template", "lists templates but none named 'default'", "add one named 'default'");
  } else {
    throw FormatError(file.string(), "chat_template", "is neither a string nor a list of {name, template}", "restore the file");
  }
  return parse(body, file.string(), token_text(cfg, "bos_token"), token_text(cfg, "eos_token"));
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt) const {
  return render_with({{"messages", messages}, {"add_generation_prompt", add_generation_prompt}});
}

std::string ChatTemplate::render_with(nlohmann::ordered_json context) const {
  if (!context.contains("bos_token")) context["bos_token"] = bos_;
  if (!context.contains("eos_token")) context["eos_token"] = eos_;
  for (const char* absent : {"tools", "documents"})  // transformers passes them as None when not given
    if (!context.contains(absent)) context[absent] = nullptr;
  return jinja::render(program_->body, context, source_);
}

}  // namespace mosaic
