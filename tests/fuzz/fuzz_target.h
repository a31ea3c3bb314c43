#pragma once
// What every fuzz target checks: an input is either accepted or refused with a mosaic::Error (the
// typed error a user sees, exit 2). Anything else escaping a parser — std::bad_alloc, a JSON library
// exception, std::out_of_range — reaches std::terminate and libFuzzer reports it, as it reports
// crashes, hangs, leaks and sanitizer findings.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <utility>

#include "common/error.h"

namespace mosaic::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The parsed value, or nullopt when the input was refused with a typed error.
template <class Parse>
auto accepted(Parse&& parse) -> std::optional<decltype(parse())> {
  try {
    return std::forward<Parse>(parse)();
  } catch (const mosaic::Error&) {
    return std::nullopt;
  }
}

// A property of an accepted input that does not hold: a finding, reported like a crash.
[[noreturn]] inline void violated(const char* what) {
  std::fprintf(stderr, "fuzz: property violated: %s\n", what);
  std::abort();
}

}  // namespace mosaic::fuzz
