#include "runtime/host_store.h"

#include "runtime/cpu_weights.h"

namespace mosaic {

HostStore::HostStore(const Family& family) {
  for (const Variant& v : family.variants()) {
    names_.push_back(v.name);
    models_.push_back(Model::load(*v.checkpoint));
  }
  const ModelSpec& s = spec();
  const std::uint64_t f32 = sizeof(float);
  expert_bytes_ = 3 * static_cast<std::uint64_t>(s.hidden_size * s.expert_intermediate) * f32;
  // Everything but the routed experts: the checkpoint's own count, rescaled from its dtype to fp32.
  std::uint64_t elements = 0;
  for (const Weight& w : family.variants().front().checkpoint->weights())
    if (!w.expected.is_expert()) elements += static_cast<std::uint64_t>(w.info->numel());
  non_expert_bytes_ = elements * f32;
}

int HostStore::index(const std::string& name) const {
  for (std::size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return static_cast<int>(i);
  return -1;
}

}  // namespace mosaic
