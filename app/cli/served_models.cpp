#include "cli/served_models.h"

namespace mosaic::cli {

std::vector<server::ServedModel> served_models(const ServingSession& s) {
  std::vector<server::ServedModel> out;
  const HostStore& store = *s.store;
  for (int t = 0; t < store.targets(); ++t) {
    const Variant* v = s.family.find(store.name(t));
    if (!v) continue;
    server::ServedModel m{.id = v->name, .base = {}, .tokenizer = Tokenizer::load(v->checkpoint->dir() / "tokenizer.json"),
                          .eos_ids = store.spec().eos_token_ids, .context = store.spec().max_position_embeddings};
    if (v->checkpoint->is_adapter() || v->checkpoint->is_delta()) m.base = v->checkpoint->base_dir().filename().string();
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace mosaic::cli
