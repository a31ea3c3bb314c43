#pragma once
// UTF-8 decoding and encoding for the tokenizer. Invalid bytes decode as themselves (one code
// point per byte, marked invalid) so that any byte string survives a round trip.
#include <cstdint>
#include <string>
#include <string_view>

namespace mosaic {

struct CodePoint {
  char32_t value = 0;
  std::size_t length = 1;  // bytes consumed
  bool valid = true;
};

// The code point starting at text[pos] (pos < text.size()).
CodePoint decode_utf8(std::string_view text, std::size_t pos);
void append_utf8(std::string& out, char32_t cp);

}  // namespace mosaic
