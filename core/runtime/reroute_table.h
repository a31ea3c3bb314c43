#pragma once
// One MoE layer's map from (row, routed expert id) to the slot that serves it, or kMiss. A row is a
// target: a variant or an ESFT adapter. Consolidation points every row at a layout's shared copy;
// ESFT points an adapter's tuned experts at its own slots and the rest at the base's; a miss policy
// that keeps what it loads fills entries and empties them on eviction.
#include <cstdint>
#include <vector>

namespace mosaic {

class RerouteTable {
 public:
  static constexpr std::int32_t kMiss = -1;
  RerouteTable(int targets, std::int64_t experts)
      : targets_(targets), experts_(experts), slots_(static_cast<std::size_t>(targets * experts), kMiss) {}

  int targets() const { return targets_; }
  std::int64_t experts() const { return experts_; }
  std::int32_t at(int target, std::int64_t expert) const { return slots_[index(target, expert)]; }
  void set(int target, std::int64_t expert, std::int32_t slot) { slots_[index(target, expert)] = slot; }
  const std::vector<std::int32_t>& data() const { return slots_; }  // [targets, experts], row-major: the device layout

 private:
  std::size_t index(int target, std::int64_t expert) const { return static_cast<std::size_t>(target * experts_ + expert); }
  int targets_;
  std::int64_t experts_;
  std::vector<std::int32_t> slots_;
};

}  // namespace mosaic
