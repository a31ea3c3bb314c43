#pragma once
// Hugging Face chat templates: the Jinja template in tokenizer_config.json's "chat_template" that
// turns a conversation into the prompt a chat model was tuned on. Rendered as transformers'
// apply_chat_template renders it (trim_blocks, lstrip_blocks, loop controls, raise_exception,
// strftime_now, tojson without ASCII escapes), for the Jinja that models' templates use: if/elif/
// else, for (with loop.*, else, an `if` filter, unpacking), set (namespace attributes too), macro,
// break/continue; Python's operators, slices and str methods; the common filters and tests. What
// lies outside that subset is refused when the template is read, naming the line.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace mosaic {

namespace jinja {
struct Stmt;
}

class ChatTemplate {
 public:
  // Throws FormatError naming `source` and the line of what it cannot read.
  static ChatTemplate parse(const std::string& text, const std::string& source, std::string bos_token = {}, std::string eos_token = {});
  // `dir`/tokenizer_config.json's template (a string, or the one named "default" among a list of
  // {name, template}), with its bos_token and eos_token. nullopt when the folder has no
  // tokenizer_config.json or the file has no template. Throws FormatError for a file that is not
  // JSON or a template that does not parse, naming the file.
  static std::optional<ChatTemplate> load(const std::filesystem::path& dir);

  // `messages`: [{"role", "content"}, …]. Throws InvalidArgument with the template's own words when
  // it refuses them (raise_exception: roles out of order, a role it has no place for), or naming
  // the line that failed.
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt) const;
  // The same with every variable given (messages, add_generation_prompt, tools, …); bos_token and
  // eos_token are added where `context` has none.
  std::string render_with(nlohmann::ordered_json context) const;

  const std::string& source() const { return source_; }

 private:
  ChatTemplate() = default;
  struct Program;
  std::shared_ptr<const Program> program_;
  std::string source_, bos_, eos_;
};

}  // namespace mosaic
