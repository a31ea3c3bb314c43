#include "model/text_stream.h"

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

std::string TextStream::push(std::int64_t token) {
  tokens_.push_back(token);
  const std::string text = tokenizer_->decode(tokens_);
  return advance(text.substr(0, complete_prefix(text)));
}

std::string TextStream::finish() { return advance(tokenizer_->decode(tokens_)); }

std::string TextStream::advance(std::string text) {
  std::string added;
  if (text.size() >= shown_.size() && text.compare(0, shown_.size(), shown_) == 0) added = text.substr(shown_.size());
  shown_ = std::move(text);
  return added;
}

}  // namespace mosaic
