#pragma once
// Every tensor of every variant of a family in host memory, in the backend's compute dtype (fp32 on
// the CPU backend), from which the device's non-expert set and expert slots are filled.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/family.h"
#include "runtime/model.h"

namespace mosaic {

class HostStore {
 public:
  explicit HostStore(const Family& family);  // converts every variant; throws what Model::load throws

  const ModelSpec& spec() const { return models_.front()->spec(); }
  int variants() const { return static_cast<int>(models_.size()); }
  const std::string& name(int variant) const { return names_[static_cast<std::size_t>(variant)]; }
  int index(const std::string& name) const;  // -1 when absent
  const Model& model(int variant) const { return *models_[static_cast<std::size_t>(variant)]; }

  // Bytes of one variant's non-expert weights and of one routed expert, as held on the device.
  std::uint64_t non_expert_bytes() const { return non_expert_bytes_; }
  std::uint64_t expert_bytes() const { return expert_bytes_; }

 private:
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<Model>> models_;
  std::uint64_t non_expert_bytes_ = 0, expert_bytes_ = 0;
};

}  // namespace mosaic
