#include "common/edit_distance.h"

#include <algorithm>

namespace mosaic {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string_view nearest_name(std::string_view name, const std::vector<std::string_view>& candidates) {
  std::string_view best;
  std::size_t best_d = std::max<std::size_t>(1, name.size() / 3) + 1;  // a third of the letters at most
  for (std::string_view c : candidates)
    if (const std::size_t d = edit_distance(name, c); d < best_d) best_d = d, best = c;
  return best;
}

}  // namespace mosaic
