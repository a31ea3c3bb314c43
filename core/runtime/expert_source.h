#pragma once
// What an expert slot holds: a full checkpoint's expert, an ESFT adapter's tuned expert, a delta
// folder's expert (DeltaMoE: its base's expert plus a packed delta), or nothing.
#include <cstdint>

namespace mosaic {

struct ExpertSource {
  enum class Kind { Empty, Full, Adapter, Delta };
  Kind kind = Kind::Empty;
  int target = -1;           // the variant (Full), adapter (Adapter) or delta folder (Delta) whose expert it is
  std::int64_t expert = -1;  // which expert of the slot's layer

  static ExpertSource full(int variant, std::int64_t expert) { return {Kind::Full, variant, expert}; }
  static ExpertSource adapter(int adapter, std::int64_t expert) { return {Kind::Adapter, adapter, expert}; }
  static ExpertSource delta(int variant, std::int64_t expert) { return {Kind::Delta, variant, expert}; }
  bool empty() const { return kind == Kind::Empty; }
  bool operator==(const ExpertSource&) const = default;
};

}  // namespace mosaic
