#pragma once
// One file named two ways (relative, through a link, with `..`) compares equal after this.
#include <filesystem>
#include <system_error>

namespace mosaic {

// The canonical form where it can be had, else the lexically normal one (a path that does not exist).
inline std::filesystem::path canonical_or_self(const std::filesystem::path& p) {
  std::error_code ec;
  const auto c = std::filesystem::weakly_canonical(p, ec);
  return ec ? p.lexically_normal() : c;
}

}  // namespace mosaic
