#pragma once
// One MoE layer's map from (target variant, routed expert id) to the slot that serves it, or kMiss.
// Consolidation points several targets at one slot; a miss policy fills and empties entries.
#include <cstdint>
#include <vector>

namespace mosaic {

class RerouteTable {
 public:
  static constexpr std::int32_t kMiss = -1;
  RerouteTable(int targets, std::int64_t experts)
      : experts_(experts), slots_(static_cast<std::size_t>(targets * experts), kMiss) {}

  std::int32_t at(int target, std::int64_t expert) const { return slots_[index(target, expert)]; }
  void set(int target, std::int64_t expert, std::int32_t slot) { slots_[index(target, expert)] = slot; }
  const std::vector<std::int32_t>& data() const { return slots_; }  // [targets, experts], row-major

 private:
  std::size_t index(int target, std::int64_t expert) const { return static_cast<std::size_t>(target * experts_ + expert); }
  std::int64_t experts_;
  std::vector<std::int32_t> slots_;
};

}  // namespace mosaic
