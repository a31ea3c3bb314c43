#include "model/family.h"

#include "common/error.h"

namespace mosaic {

const Variant& Family::add(std::string name, const std::filesystem::path& dir, const std::filesystem::path& base_hint) {
  if (find(name))
    throw InvalidArgument(dir.string(), "variant '" + name + "'", "the family already has a variant of this name",
                          "give each variant its own name");
  auto checkpoint = std::make_unique<Checkpoint>(dir, base_hint);
  if (!variants_.empty()) {
    const Variant& first = variants_.front();
    if (const auto diff = first_difference(first.checkpoint->spec(), checkpoint->spec()))
      throw MismatchError(dir.string(), "variant '" + name + "'",
                          "does not match variant '" + first.name + "' (" + first.checkpoint->dir().string() +
                              "): " + *diff,
                          "all variants of a family must be fine-tunes of one base model");
  }
  variants_.push_back({std::move(name), std::move(checkpoint)});
  return variants_.back();
}

const ModelSpec& Family::spec() const { return variants_.front().checkpoint->spec(); }

const Variant* Family::find(const std::string& name) const {
  for (const Variant& v : variants_)
    if (v.name == name) return &v;
  return nullptr;
}

}  // namespace mosaic
