#pragma once
// Sizes computed from numbers a user gave (a context length, a count of requests): a result past 64
// bits would wrap to a small, wrong size, so it is refused instead, naming what was being sized.
#include <cstdint>
#include <initializer_list>
#include <string>

#include "common/error.h"

namespace mosaic {

// a × b, or InvalidArgument(subject, field) when it does not fit in 64 bits.
inline std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const std::string& subject, const std::string& field) {
  std::uint64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out))
    throw InvalidArgument(subject, field, "is too large: the size it gives does not fit in 64 bits", "give a smaller number");
  return out;
}

// The product of every factor, checked as above.
inline std::uint64_t checked_product(std::initializer_list<std::uint64_t> factors, const std::string& subject, const std::string& field) {
  std::uint64_t out = 1;
  for (std::uint64_t f : factors) out = checked_mul(out, f, subject, field);
  return out;
}

inline std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, const std::string& subject, const std::string& field) {
  std::uint64_t out = 0;
  if (__builtin_add_overflow(a, b, &out))
    throw InvalidArgument(subject, field, "is too large: the size it gives does not fit in 64 bits", "give a smaller number");
  return out;
}

}  // namespace mosaic
