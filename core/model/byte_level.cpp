#include "model/byte_level.h"

#include <array>
#include <unordered_map>

#include "model/utf8.h"

namespace mosaic {
namespace {

enum class Cls { Space, Letter, Number, Other };

Cls classify(char32_t c) {
  if (c < 0x80) {
    if (c == ' ' || (c >= '\t' && c <= '\r')) return Cls::Space;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return Cls::Letter;
    if (c >= '0' && c <= '9') return Cls::Number;
    return Cls::Other;
  }
  if (c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
      c == 0x202F || c == 0x205F || c == 0x3000)
    return Cls::Space;
  if (c == 0xB2 || c == 0xB3 || c == 0xB9 || (c >= 0xBC && c <= 0xBE)) return Cls::Number;
  if (c == 0xAA || c == 0xB5 || c == 0xBA) return Cls::Letter;
  if ((c >= 0x80 && c <= 0xBF) || c == 0xD7 || c == 0xF7 || (c >= 0x2010 && c <= 0x205E)) return Cls::Other;
  return Cls::Letter;
}

struct Scanner {
  std::string_view text;
  std::size_t cls_at(std::size_t pos, Cls& cls) const {  // returns the code point's length
    const CodePoint cp = decode_utf8(text, pos);
    cls = cp.valid ? classify(cp.value) : Cls::Other;
    return cp.length;
  }
  // End of the run of `cls` starting at pos.
  std::size_t run(std::size_t pos, Cls cls) const {
    while (pos < text.size()) {
      Cls c;
      const std::size_t n = cls_at(pos, c);
      if (c != cls) break;
      pos += n;
    }
    return pos;
  }
};

std::size_t contraction(std::string_view rest) {
  if (rest.size() < 2 || rest[0] != '\'') return 0;
  for (std::string_view c : {"re", "ve", "ll"})
    if (rest.substr(1, 2) == c) return 3;
  for (char c : {'s', 't', 'm', 'd'})
    if (rest[1] == c) return 2;
  return 0;
}

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
  std::vector<std::string_view> words;
  const Scanner s{text};
  std::size_t i = 0;
  while (i < text.size()) {
    if (const std::size_t n = contraction(text.substr(i))) {
      words.push_back(text.substr(i, n));
      i += n;
      continue;
    }
    Cls c;
    const std::size_t len = s.cls_at(i, c);
    if (c != Cls::Space) {  // \p{L}+, \p{N}+ or [^\s\p{L}\p{N}]+
      const std::size_t end = s.run(i + len, c);
      words.push_back(text.substr(i, end - i));
      i = end;
      continue;
    }
    // A space directly before a non-space joins the following word (" ?X+").
    if (text[i] == ' ' && i + 1 < text.size()) {
      Cls next;
      s.cls_at(i + 1, next);
      if (next != Cls::Space) {
        const std::size_t end = s.run(i + 1, next);
        words.push_back(text.substr(i, end - i));
        i = end;
        continue;
      }
    }
    // \s+(?!\S): a whitespace run before a non-space leaves its last character to what follows.
    const std::size_t end = s.run(i, Cls::Space);
    std::size_t take = end;
    if (end < text.size()) {
      std::size_t last = i;  // start of the run's last code point
      for (std::size_t p = i; p < end;) {
        Cls ignored;
        last = p;
        p += s.cls_at(p, ignored);
      }
      if (last > i) take = last;
      else take = end;  // a single whitespace character (not a joining space) stands alone
    }
    words.push_back(text.substr(i, take - i));
    i = take;
  }
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
