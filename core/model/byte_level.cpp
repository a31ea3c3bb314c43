#include "model/byte_level.h"

#include <array>
#include <unordered_map>

#include "model/regex.h"
#include "model/utf8.h"

namespace mosaic {
namespace {

std::array<std::string, 256> make_byte_symbols() {
  // Printable Latin-1 bytes stand for themselves; the rest map to U+0100 onwards, in byte order.
  std::array<std::string, 256> out;
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    append_utf8(out[static_cast<std::size_t>(b)], printable ? static_cast<char32_t>(b) : next++);
  }
  return out;
}

const std::array<std::string, 256>& byte_symbols() {
  static const std::array<std::string, 256> table = make_byte_symbols();
  return table;
}

}  // namespace

std::vector<std::string_view> split_gpt2(std::string_view text) {
  static const Regex gpt2(kGpt2Split, false, "GPT-2's split", "pattern");
  // Matches, and what lies between them (bytes that are not UTF-8) as pieces of their own, as HF's
  // Isolated split lays them.
  std::vector<std::string_view> words;
  std::size_t at = 0;
  for (const auto& [begin, end] : gpt2.matches(text)) {
    if (begin > at) words.push_back(text.substr(at, begin - at));
    words.push_back(text.substr(begin, end - begin));
    at = end;
  }
  if (at < text.size()) words.push_back(text.substr(at));
  return words;
}

const std::string& byte_symbol(unsigned char byte) { return byte_symbols()[byte]; }

std::string to_byte_symbols(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) out += byte_symbol(static_cast<unsigned char>(b));
  return out;
}

bool from_byte_symbols(std::string_view symbols, std::string& bytes) {
  static const std::unordered_map<char32_t, unsigned char> inverse = [] {
    std::unordered_map<char32_t, unsigned char> m;
    for (int b = 0; b < 256; ++b) m[decode_utf8(byte_symbols()[static_cast<std::size_t>(b)], 0).value] = static_cast<unsigned char>(b);
    return m;
  }();
  for (std::size_t i = 0; i < symbols.size();) {
    const CodePoint cp = decode_utf8(symbols, i);
    const auto it = inverse.find(cp.value);
    if (!cp.valid || it == inverse.end()) return false;
    bytes += static_cast<char>(it->second);
    i += cp.length;
  }
  return true;
}

}  // namespace mosaic
