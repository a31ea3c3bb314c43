#pragma once
// The regular expressions HF tokenizer.json files carry (Split patterns, GPT-2's ByteLevel split),
// matched as HF tokenizers' Oniguruma matches them: UTF-8, Unicode properties (\p{L}, \p{N}, \s),
// inline flags ((?i:…)), look-ahead ((?!\S)). PCRE2 underneath, JIT-compiled where it can be.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mosaic {

class Regex {
 public:
  // Throws FormatError naming `source` and `field` when the pattern does not compile. `literal`:
  // the pattern is a plain string to find (a Split's {"String": …}).
  Regex(std::string_view pattern, bool literal, const std::string& source, const std::string& field);

  // The non-overlapping, non-empty matches in `text`, left to right, as [begin, end) byte offsets.
  // Any thread. Bytes that are not UTF-8 are never part of a match.
  std::vector<std::pair<std::size_t, std::size_t>> matches(std::string_view text) const;

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
};

}  // namespace mosaic
