#include "server/served_models.h"

#include <chrono>
#include <filesystem>

#include "common/error.h"

namespace mosaic::server {
namespace {

// When the model was made, as far as the folder says: its config.json's last write, else the
// folder's (an adapter folder may have no config.json); 0 if neither can be read.
std::int64_t written_at(const std::filesystem::path& dir) {
  std::error_code ec;
  auto t = std::filesystem::last_write_time(dir / "config.json", ec);
  if (ec) t = std::filesystem::last_write_time(dir, ec);
  if (ec) return 0;
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::file_clock::to_sys(t).time_since_epoch()).count();
}

}  // namespace

std::vector<ServedModel> served_models(const Family& family, const HostStore& store, bool chat_templates) {
  std::vector<ServedModel> out;
  for (int t = 0; t < store.targets(); ++t) {
    const Variant* v = family.find(store.name(t));
    if (!v) continue;
    ServedModel m{.id = v->name, .base = {}, .tokenizer = Tokenizer::load(v->checkpoint->tokenizer_file()),
                  .eos_ids = store.spec().eos_token_ids, .context = store.spec().max_position_embeddings,
                  .created = written_at(v->checkpoint->dir())};
    const bool over_base = v->checkpoint->is_adapter() || v->checkpoint->is_delta();
    if (over_base) m.base = v->checkpoint->base_dir().filename().string();
    if (chat_templates) try {
        m.chat_template = ChatTemplate::load(v->checkpoint->dir());
        if (!m.chat_template && over_base) m.chat_template = ChatTemplate::load(v->checkpoint->base_dir());
      } catch (const FormatError& e) {
        throw FormatError(e.subject(), e.item(), e.problem(),
                          "fix the template, or serve every model with plain 'role: content' lines (mosaic-cli serve --plain-chat)");
      }
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<std::int64_t> chat_prompt_ids(const ServedModel& m, const std::vector<ChatMessage>& messages) {
  if (!m.chat_template) return m.tokenizer.encode(plain_chat_prompt(messages));
  // A template walks the messages per message (some for each one): a bound keeps one rendering
  // short. Far more than any context holds.
  if (messages.size() > 4096) throw InvalidArgument("messages", "", "more than 4096 messages in one conversation");
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& msg : messages) list.push_back({{"role", msg.role}, {"content", msg.content}});
  std::string text;
  try {
    text = m.chat_template->render(list, /*add_generation_prompt=*/true);
  } catch (const Error& e) {
    throw InvalidArgument("messages", "", "the chat template of '" + m.id + "' refuses these messages: " + e.problem());
  }
  return m.tokenizer.encode(text, /*add_special=*/false);
}

}  // namespace mosaic::server
