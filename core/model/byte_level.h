#pragma once
// GPT-2's byte-level scheme, as HF tokenizers' ByteLevel pre-tokenizer and decoder implement it:
// text is split into words by GPT-2's regex, and every byte maps to a printable code point so that
// BPE works on strings without spaces or control characters.
#include <string>
#include <string_view>
#include <vector>

namespace mosaic {

// GPT-2's split, which HF's ByteLevel pre-tokenizer applies when use_regex is set (byte_level.rs).
inline constexpr std::string_view kGpt2Split = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// `text` cut by kGpt2Split, as HF tokenizers cuts it (Unicode properties exact); joined, the
// pieces are `text`.
std::vector<std::string_view> split_gpt2(std::string_view text);

// The printable stand-in of each byte (bytes_to_unicode in GPT-2), UTF-8 encoded.
const std::string& byte_symbol(unsigned char byte);
std::string to_byte_symbols(std::string_view bytes);
// The inverse; false when `symbols` holds a code point that is no byte's stand-in.
bool from_byte_symbols(std::string_view symbols, std::string& bytes);

}  // namespace mosaic
