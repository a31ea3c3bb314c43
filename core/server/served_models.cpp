#include "server/served_models.h"

namespace mosaic::server {

std::vector<ServedModel> served_models(const Family& family, const HostStore& store) {
  std::vector<ServedModel> out;
  for (int t = 0; t < store.targets(); ++t) {
    const Variant* v = family.find(store.name(t));
    if (!v) continue;
    ServedModel m{.id = v->name, .base = {}, .tokenizer = Tokenizer::load(v->checkpoint->dir() / "tokenizer.json"),
                  .eos_ids = store.spec().eos_token_ids, .context = store.spec().max_position_embeddings};
    if (v->checkpoint->is_adapter() || v->checkpoint->is_delta()) m.base = v->checkpoint->base_dir().filename().string();
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace mosaic::server
