#pragma once
// The text of a growing token stream, handed out piece by piece as tokens arrive (chat, generate,
// side-by-side compare, the HTTP server). An incomplete UTF-8 character at the end (byte-fallback
// tokens arrive a byte at a time) is held back until its last byte comes, so no piece splits a
// character. Only the tokens since the last point where the text was whole are decoded again: the
// tokenizer decodes token by token (Tokenizer::decode), so text before that point cannot change,
// and a long answer costs each token O(1) instead of a decode of everything so far.
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
  // The text of the tokens from `settled_` on.
  std::string tail() const;
  // Hands out what `text` (the tail's) adds to what was shown of the tail, and shows it.
  std::string advance(std::string text);
  // The tail, all of it shown, becomes settled: later tokens only add to its text.
  void settle();

  const Tokenizer* tokenizer_;
  std::vector<std::int64_t> tokens_;
  std::size_t settled_ = 0;    // tokens whose text is handed out whole and cannot change
  bool settled_text_ = false;  // whether they made any text (until then the text's start is ahead)
  std::string shown_;          // what was handed out of the tail's text
};

}  // namespace mosaic
