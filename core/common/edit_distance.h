#pragma once
// How far apart two names are (edits, a swap of neighbours counting one), for "did you mean".
#include <cstddef>
#include <string_view>
#include <vector>

namespace mosaic {

std::size_t edit_distance(std::string_view a, std::string_view b);
// The candidate nearest to `name`, when it is near enough to be a likely typo; "" otherwise.
std::string_view nearest_name(std::string_view name, const std::vector<std::string_view>& candidates);

}  // namespace mosaic
