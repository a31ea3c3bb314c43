#pragma once
// The text of a growing token stream, handed out piece by piece as tokens arrive (chat, generate,
// side-by-side compare). Decoding the whole stream each time keeps merged spaces right; an
// incomplete UTF-8 character at the end (byte-fallback tokens arrive a byte at a time) is held back
// until its last byte comes, so no piece splits a character.
#include <cstdint>
#include <string>
#include <vector>

#include "model/tokenizer.h"

namespace mosaic {

class TextStream {
 public:
  explicit TextStream(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}

  // The text `token` adds; "" while a character is incomplete, or when decoding rewrote text
  // already handed out (then the stream goes on from the new text).
  std::string push(std::int64_t token);
  // What is still held back when the stream ends (a character cut short by the last token), so that
  // every byte decoded is handed out once.
  std::string finish();
  const std::vector<std::int64_t>& tokens() const { return tokens_; }

 private:
  // Hands out what `text` adds to what was shown, and shows it.
  std::string advance(std::string text);

  const Tokenizer* tokenizer_;
  std::vector<std::int64_t> tokens_;
  std::string shown_;
};

}  // namespace mosaic
