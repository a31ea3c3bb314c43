#include "common/edit_distance.h"

#include <algorithm>

namespace mosaic {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: insertions, deletions, substitutions and swaps of neighbours cost 1.
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string_view nearest_name(std::string_view name, const std::vector<std::string_view>& candidates) {
  std::string_view best;
  std::size_t best_d = std::max<std::size_t>(1, name.size() / 3) + 1;  // a third of the letters at most
  for (std::string_view c : candidates)
    if (const std::size_t d = edit_distance(name, c); d < best_d) best_d = d, best = c;
  return best;
}

}  // namespace mosaic
