#include "common/byte_size.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace mosaic {

namespace {

struct Parsed {
  std::optional<std::uint64_t> bytes;
  std::string problem;
};

Parsed parse(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && text[i] == ' ') ++i;
  const std::size_t start = i;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data() + start, text.data() + i, value);
  if (i == start || ec != std::errc() || end != text.data() + i || value < 0) return {std::nullopt, "has no number of bytes"};
  std::string unit;
  for (char c : text.substr(i))
    if (c != ' ') unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static constexpr struct { const char* name; double factor; } kUnits[] = {
      {"", 1},         {"b", 1},         {"kib", 0x1p10}, {"mib", 0x1p20}, {"gib", 0x1p30}, {"tib", 0x1p40}, {"pib", 0x1p50},
      {"eib", 0x1p60}, {"kb", 1e3},      {"mb", 1e6},     {"gb", 1e9},     {"tb", 1e12},    {"pb", 1e15},    {"eb", 1e18},
      {"k", 0x1p10},   {"m", 0x1p20},    {"g", 0x1p30},   {"t", 0x1p40},   {"p", 0x1p50},   {"e", 0x1p60}};
  for (const auto& u : kUnits)
    if (unit == u.name) {
      const double bytes = std::floor(value * u.factor);
      if (!(bytes < 0x1p63)) return {std::nullopt, "is more than 8 EiB: more memory than any machine has"};
      return {static_cast<std::uint64_t>(bytes), {}};
    }
  return {std::nullopt, "has an unknown unit '" + std::string(text.substr(i)) +
                            "' (use B, KiB, MiB, GiB, TiB, PiB, EiB, or kB, MB, GB, TB, PB, EB)"};
}

}  // namespace

std::optional<std::uint64_t> parse_byte_size(std::string_view text) { return parse(text).bytes; }
std::string byte_size_problem(std::string_view text) { return parse(text).problem; }

std::string format_bytes(std::uint64_t b) {
  char buf[32];
  if (b < 1024) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  else if (b < (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f KiB", b / 0x1p10);
  else if (b < (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f MiB", b / 0x1p20);
  else if (b < (1ull << 40)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / 0x1p30);
  else if (b < (1ull << 50)) std::snprintf(buf, sizeof buf, "%.2f TiB", b / 0x1p40);
  else if (b < (1ull << 60)) std::snprintf(buf, sizeof buf, "%.2f PiB", b / 0x1p50);
  else std::snprintf(buf, sizeof buf, "%.2f EiB", b / 0x1p60);
  return buf;
}

}  // namespace mosaic
