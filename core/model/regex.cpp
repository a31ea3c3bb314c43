#include "model/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "common/error.h"
#include "model/utf8.h"

namespace mosaic {

struct Regex::Code {
  pcre2_code* re = nullptr;
  explicit Code(pcre2_code* r) : re(r) {}
  Code(const Code&) = delete;
  Code& operator=(const Code&) = delete;
  ~Code() { pcre2_code_free(re); }
};

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, sizeof buf);
  return n < 0 ? "error " + std::to_string(code) : std::string(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
}

}  // namespace

Regex::Regex(std::string_view pattern, bool literal, const std::string& source, const std::string& field) {
  // UCP: \s, \d, \w and POSIX classes by Unicode property, as Oniguruma's are on UTF-8 text.
  // MATCH_INVALID_UTF: text that is not UTF-8 is matched, its bad bytes never part of a match
  // (HF never sees such text: a Rust string is UTF-8; Mosaic's tokenizer takes any bytes).
  const std::uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  int error = 0;
  PCRE2_SIZE at = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &at, nullptr);
  if (!re)
    throw FormatError(source, field, "is not a regular expression Mosaic can match: " + pcre2_message(error) + " at byte " + std::to_string(at),
                      "take tokenizer.json from the checkpoint again");
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // where JIT is refused (no executable memory), matching interprets
  code_ = std::make_shared<const Code>(re);
}

std::vector<std::pair<std::size_t, std::size_t>> Regex::matches(std::string_view text) const {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(pcre2_match_data_create_from_pattern(code_->re, nullptr),
                                                                          &pcre2_match_data_free);
  if (!md) throw std::bad_alloc();
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t at = 0;
  while (at < text.size()) {
    const int rc = pcre2_match(code_->re, subject, text.size(), at, 0, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0)
      throw InvalidArgument("text", "", "could not be split by the tokenizer's pattern (" + pcre2_message(rc) + ")",
                            "send shorter text, or report the tokenizer.json that failed");
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    if (ov[1] > ov[0]) {
      out.emplace_back(ov[0], ov[1]);
      at = ov[1];
    } else {  // an empty match cuts nothing: look again from the next character
      if (ov[0] >= text.size()) break;
      at = ov[0] + decode_utf8(text, ov[0]).length;
    }
  }
  return out;
}

}  // namespace mosaic
