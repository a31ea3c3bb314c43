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

// Both exist and are one file: through symbolic links, and as hard links of one another.
inline bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code ec;
  return std::filesystem::exists(a, ec) && std::filesystem::exists(b, ec) && std::filesystem::equivalent(a, b, ec) && !ec;
}

}  // namespace mosaic
