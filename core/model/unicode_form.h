#pragma once
// Unicode normalization forms, as HF tokenizers' NFC and NFKC normalizers apply them (Qwen2 and Qwen3
// ship NFC): ICU underneath. Bytes that are not UTF-8 pass through unchanged.
#include <string>
#include <string_view>

namespace mosaic {

enum class UnicodeForm { NFC, NFKC };

std::string normalize(std::string_view text, UnicodeForm form);

}  // namespace mosaic
