#pragma once
// Byte counts as people write them: "12GiB", "1.5 GB", "4096".
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mosaic {

// Binary (KiB … EiB) and decimal (kB … EB) suffixes, case-insensitive, optional space, fractional
// values allowed. nullopt when the text is not a byte size, or is one beyond 8 EiB (more memory than
// any machine has); byte_size_problem says which, for a message.
std::optional<std::uint64_t> parse_byte_size(std::string_view text);
// Empty when `text` parses; else why not: "has no number", "has an unknown unit 'x' (…)", "is …,
// more than any machine has".
std::string byte_size_problem(std::string_view text);
// "512 B", "1.50 KiB", "12.00 GiB".
std::string format_bytes(std::uint64_t bytes);

}  // namespace mosaic
