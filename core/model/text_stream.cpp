#include "model/text_stream.h"

#include <span>
#include <utility>

namespace mosaic {
namespace {

// Where the complete characters of `text` end: before a trailing lead byte whose continuation bytes
// have not all arrived. Invalid bytes count as complete (they will never be completed).
std::size_t complete_prefix(const std::string& text) {
  const std::size_t n = text.size();
  for (std::size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back for its lead
    const std::size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

}  // namespace

std::string TextStream::tail() const {
  const std::span<const std::int64_t> rest = std::span(tokens_).subspan(settled_);
  return tokenizer_->decode(rest, /*keep_special=*/false, /*text_start=*/!settled_text_);
}

void TextStream::settle() {
  // Not before there is some text: a Metaspace decoder drops the space that starts the text, which
  // may be a later token's ("▁" then "▁Hi" is " Hi").
  if (!settled_text_ && shown_.empty()) return;
  settled_ = tokens_.size();
  settled_text_ = true;
  shown_.clear();
}

std::string TextStream::push(std::int64_t token) {
  tokens_.push_back(token);
  const std::string text = tail();
  const std::size_t whole = complete_prefix(text);
  std::string added = advance(text.substr(0, whole));
  if (whole == text.size()) settle();  // all of it handed out, ending on a whole character
  return added;
}

std::string TextStream::finish() {
  std::string added = advance(tail());
  settle();
  return added;
}

std::string TextStream::advance(std::string text) {
  std::string added;
  if (text.size() >= shown_.size() && text.compare(0, shown_.size(), shown_) == 0) added = text.substr(shown_.size());
  shown_ = std::move(text);
  return added;
}

}  // namespace mosaic
