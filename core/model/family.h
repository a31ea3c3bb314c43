#pragma once
// A family: named variants (fine-tunes) of one MoE model that share one ModelSpec exactly.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model/checkpoint.h"

namespace mosaic {

struct Variant {
  std::string name;
  std::unique_ptr<Checkpoint> checkpoint;
};

class Family {
 public:
  // Opens and validates the checkpoint, then checks it against the family's first variant.
  // Throws MismatchError naming the first differing config field, InvalidArgument for a taken name.
  // `base_hint`: an ESFT adapter's base where its expert_cfg.json names none (Checkpoint).
  const Variant& add(std::string name, const std::filesystem::path& dir, const std::filesystem::path& base_hint = {});

  bool empty() const { return variants_.empty(); }
  std::size_t size() const { return variants_.size(); }
  const ModelSpec& spec() const;  // precondition: !empty()
  const std::vector<Variant>& variants() const { return variants_; }
  const Variant* find(const std::string& name) const;

 private:
  std::vector<Variant> variants_;
};

}  // namespace mosaic
