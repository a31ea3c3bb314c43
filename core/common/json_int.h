#pragma once
// Whether a JSON value is an integer in [min, max], read without wrapping: nlohmann hands a number
// above int64's range back as a negative int64, and get<int> truncates 2^32 + 5 to 5.
#include <cstdint>
#include <nlohmann/json.hpp>

namespace mosaic {

inline bool json_int_in(const nlohmann::json& v, std::int64_t min, std::int64_t max) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) {  // every integer ≥ 0 parses as unsigned
    const std::uint64_t u = v.get<std::uint64_t>();
    return max >= 0 && u <= static_cast<std::uint64_t>(max) && (min <= 0 || u >= static_cast<std::uint64_t>(min));
  }
  return v.get<std::int64_t>() >= min && v.get<std::int64_t>() <= max;
}

}  // namespace mosaic
