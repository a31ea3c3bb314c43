#include "server/served_models.h"

#include "common/error.h"

namespace mosaic::server {

std::vector<ServedModel> served_models(const Family& family, const HostStore& store, bool chat_templates) {
  std::vector<ServedModel> out;
  for (int t = 0; t < store.targets(); ++t) {
    const Variant* v = family.find(store.name(t));
    if (!v) continue;
    ServedModel m{.id = v->name, .base = {}, .tokenizer = Tokenizer::load(v->checkpoint->dir() / "tokenizer.json"),
                  .eos_ids = store.spec().eos_token_ids, .context = store.spec().max_position_embeddings};
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

}  // namespace mosaic::server
