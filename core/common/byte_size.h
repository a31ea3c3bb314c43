#pragma once
// Byte counts as people write them: "12GiB", "1.5 GB", "4096".
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mosaic {

// Binary (KiB, MiB, GiB, TiB) and decimal (kB, MB, GB, TB) suffixes, case-insensitive, optional
// space, fractional values allowed. nullopt when the text is not a byte size.
std::optional<std::uint64_t> parse_byte_size(std::string_view text);
// "512 B", "1.50 KiB", "12.00 GiB".
std::string format_bytes(std::uint64_t bytes);

}  // namespace mosaic
