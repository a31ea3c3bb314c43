#pragma once
// What an expert slot holds. Only full experts exist today; ESFT adapter experts and DeltaMoE's
// base + compressed delta experts become further kinds, not further engines.
#include <cstdint>

namespace mosaic {

struct ExpertSource {
  enum class Kind { Empty, Full };
  Kind kind = Kind::Empty;
  int variant = -1;         // whose copy
  std::int64_t expert = -1;  // which expert of the slot pool's layer

  static ExpertSource full(int variant, std::int64_t expert) { return {Kind::Full, variant, expert}; }
  bool empty() const { return kind == Kind::Empty; }
  bool operator==(const ExpertSource&) const = default;
};

}  // namespace mosaic
