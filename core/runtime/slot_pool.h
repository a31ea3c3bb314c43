#pragma once
// One MoE layer's expert slots on the device: storage for `size()` experts and what each holds.
// Slots come in three roles: pinned (the layout's resident copies, never evicted), spare (filled
// by the LRU miss policy, evicted least recently used first) and scratch (the transient miss
// policy's load-use-drop slots).
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "model/model_spec.h"
#include "runtime/expert_source.h"

namespace mosaic {

struct SlotStorage;  // runtime/cpu_slots.h: the backend's buffers

class SlotPool {
 public:
  enum class Role { Pinned, Spare, Scratch };

  SlotPool(const ModelSpec& spec, std::int64_t pinned, std::int64_t spare, std::int64_t scratch);
  ~SlotPool();
  SlotPool(SlotPool&&) noexcept;
  SlotPool& operator=(SlotPool&&) noexcept;

  std::int64_t size() const { return static_cast<std::int64_t>(sources_.size()); }
  Role role(std::int64_t slot) const;
  const ExpertSource& source(std::int64_t slot) const { return sources_[static_cast<std::size_t>(slot)]; }
  std::int64_t count(Role role) const;

  // Records that `slot` now holds `source`; the caller has copied the weights into storage().
  void fill(std::int64_t slot, const ExpertSource& source);
  void clear(std::int64_t slot);
  void touch(std::int64_t slot) { last_use_[static_cast<std::size_t>(slot)] = ++clock_; }

  // A slot of `role` to load into: an empty one first, else (spare only) the least recently used.
  // nullopt when the role has no slots.
  std::optional<std::int64_t> take(Role role) const;

  SlotStorage& storage() { return *storage_; }
  const SlotStorage& storage() const { return *storage_; }

 private:
  std::int64_t pinned_, spare_;
  std::vector<ExpertSource> sources_;
  std::vector<std::uint64_t> last_use_;
  std::uint64_t clock_ = 0;
  std::unique_ptr<SlotStorage> storage_;
};

}  // namespace mosaic
