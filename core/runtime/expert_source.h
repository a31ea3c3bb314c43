#pragma once
// What an expert slot holds: a full checkpoint's expert, an ESFT adapter's tuned expert, or nothing.
// DeltaMoE's base + compressed delta becomes one more kind here, not another engine.
#include <cstdint>

namespace mosaic {

struct ExpertSource {
  enum class Kind { Empty, Full, Adapter };
  Kind kind = Kind::Empty;
  int target = -1;           // the variant (Full) or adapter (Adapter) whose expert it is
  std::int64_t expert = -1;  // which expert of the slot's layer

  static ExpertSource full(int variant, std::int64_t expert) { return {Kind::Full, variant, expert}; }
  static ExpertSource adapter(int adapter, std::int64_t expert) { return {Kind::Adapter, adapter, expert}; }
  bool empty() const { return kind == Kind::Empty; }
  bool operator==(const ExpertSource&) const = default;
};

}  // namespace mosaic
