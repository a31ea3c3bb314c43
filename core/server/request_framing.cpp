#include "server/request_framing.h"

#include <cstdint>
#include <cstring>

namespace mosaic::server {
namespace {

constexpr std::string_view kCrlf = "\r\n";
constexpr std::size_t kMaxBlankLines = 32;
constexpr std::size_t kMaxChunkLine = 1024;  // a chunk's size and its extensions

bool is_tchar(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c != '\0' && std::strchr("!#$%&'*+-.^_`|~", c));
}

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool equals_lower(std::string_view a, std::string_view lowered) {
  if (a.size() != lowered.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lowered[i]) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

Framed refused(int status, std::string why) {
  Framed f;
  f.state = Framed::State::Refused;
  f.status = status;
  f.why = std::move(why);
  return f;
}

// A decimal or hexadecimal count, or -1 when it is not one or passes `limit`.
std::int64_t count(std::string_view digits, int base, std::uint64_t limit) {
  if (digits.empty()) return -1;
  std::uint64_t v = 0;
  for (char c : digits) {
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (base == 16 && lower(c) >= 'a' && lower(c) <= 'f') d = lower(c) - 'a' + 10;
    if (d < 0) return -1;
    v = v * static_cast<std::uint64_t>(base) + static_cast<std::uint64_t>(d);
    if (v > limit) return -2;  // too large, however many digits follow
  }
  return static_cast<std::int64_t>(v);
}

}  // namespace

Framed frame_request(std::string_view buf, const FramingLimits& lim) {
  std::size_t skip = 0;
  while (buf.substr(skip, 2) == kCrlf) {
    skip += 2;
    if (skip > 2 * kMaxBlankLines) return refused(400, "blank lines where the request line belongs");
  }
  const std::string_view b = buf.substr(skip);
  // Only the first max_head bytes can hold the head: a body arriving in pieces is not searched again.
  const std::size_t blank = b.substr(0, lim.max_head + 4).find("\r\n\r\n");
  if (blank == std::string_view::npos || blank + 4 > lim.max_head) {
    if (b.size() > lim.max_head || (blank != std::string_view::npos))
      return refused(431, "the request line and headers are larger than " + std::to_string(lim.max_head) + " bytes");
    return {};
  }
  const std::size_t head_bytes = blank + 4;

  // The request line: METHOD SP TARGET SP HTTP/1.x
  const std::size_t line_end = b.find(kCrlf);
  const std::string_view line = b.substr(0, line_end);
  const std::size_t sp1 = line.find(' '), sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return refused(400, "the request line is not 'METHOD TARGET HTTP/1.1'");
  const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1), version = line.substr(sp2 + 1);
  if (method.empty() || target.empty()) return refused(400, "the request line is not 'METHOD TARGET HTTP/1.1'");
  for (char c : method)
    if (!is_tchar(c)) return refused(400, "the request's method is not a token");
  for (char c : target)
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) return refused(400, "the request's target holds a space or a control character");
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return refused(400, "the request's version is not HTTP/1.1 or HTTP/1.0");

  // Headers: only the two that say where the body ends are read.
  std::int64_t length = -1;
  std::string_view coding;
  bool has_coding = false;
  Framed f;
  for (std::size_t pos = line_end + 2; pos < blank + 2;) {
    const std::size_t end = b.find(kCrlf, pos);
    const std::string_view h = b.substr(pos, end - pos);
    const std::size_t at = pos;
    pos = end + 2;
    if (h.front() == ' ' || h.front() == '\t') return refused(400, "a header is folded over lines (obsolete line folding)");
    const std::size_t colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0) return refused(400, "a header line has no name before a colon");
    const std::string_view name = h.substr(0, colon), value = trim(h.substr(colon + 1));
    for (char c : name)
      if (!is_tchar(c)) return refused(400, "a header's name is not a token (no spaces before its colon)");
    for (char c : value)
      if (c == '\r' || c == '\n' || c == '\0') return refused(400, "a header's value holds a line break or NUL");
    if (equals_lower(name, "content-length")) {
      const std::int64_t n = count(value, 10, lim.max_body);
      if (n == -2) return refused(413, "the body is larger than " + std::to_string(lim.max_body) + " bytes");
      if (n < 0) return refused(400, "Content-Length is not a number of bytes");
      if (length >= 0 && n != length) return refused(400, "two Content-Length headers disagree");
      length = n;
    } else if (equals_lower(name, "transfer-encoding")) {
      if (has_coding) return refused(501, "more than one Transfer-Encoding (only chunked is taken)");
      has_coding = true;
      coding = value;
    } else if (equals_lower(name, "expect") && equals_lower(value, "100-continue") && !f.expect_continue) {
      f.expect_continue = true;
      f.expect_at = at;
      f.expect_bytes = pos - at;
    }
  }
  if (has_coding && length >= 0) return refused(400, "both Content-Length and Transfer-Encoding: the body's end would be ambiguous");
  if (has_coding && version == "HTTP/1.0") return refused(400, "Transfer-Encoding in an HTTP/1.0 request");
  if (has_coding && !equals_lower(coding, "chunked"))
    return refused(501, "the Transfer-Encoding is not chunked (send the body with Content-Length, or chunked)");

  f.head_whole = true;
  f.skip = skip;
  f.method = std::string(method);
  f.target = std::string(target);
  if (!has_coding) {
    const auto body = static_cast<std::size_t>(length < 0 ? 0 : length);
    if (b.size() - head_bytes < body) return f;
    f.state = Framed::State::Complete;
    f.bytes = head_bytes + body;
    return f;
  }
  // Chunks: SIZE[;ext] CRLF DATA CRLF … 0 CRLF [trailers] CRLF
  std::size_t pos = head_bytes, total = 0;
  for (;;) {
    const std::size_t end = b.find(kCrlf, pos);
    if (end == std::string_view::npos) {
      if (b.size() - pos > kMaxChunkLine) return refused(400, "a chunk's size line is too long");
      return f;
    }
    if (end - pos > kMaxChunkLine) return refused(400, "a chunk's size line is too long");
    const std::string_view size_line = b.substr(pos, end - pos);
    const std::int64_t size = count(trim(size_line.substr(0, size_line.find(';'))), 16, lim.max_body);
    if (size == -2 || (size >= 0 && total + static_cast<std::size_t>(size) > lim.max_body))
      return refused(413, "the body is larger than " + std::to_string(lim.max_body) + " bytes");
    if (size < 0) return refused(400, "a chunk's size is not a hexadecimal number");
    pos = end + 2;
    if (size == 0) {
      const std::size_t trailers = pos;
      for (;;) {  // trailer lines, then the blank line
        const std::size_t e = b.find(kCrlf, pos);
        if (e == std::string_view::npos || e - trailers > lim.max_head) {
          if (e != std::string_view::npos || b.size() - trailers > lim.max_head)
            return refused(431, "the trailers are larger than " + std::to_string(lim.max_head) + " bytes");
          return f;
        }
        const bool blank_line = e == pos;
        pos = e + 2;
        if (blank_line) break;
      }
      f.state = Framed::State::Complete;
      f.bytes = pos;
      return f;
    }
    total += static_cast<std::size_t>(size);
    if (b.size() < pos + static_cast<std::size_t>(size) + 2) return f;
    if (b.substr(pos + static_cast<std::size_t>(size), 2) != kCrlf) return refused(400, "a chunk is not followed by CRLF");
    pos += static_cast<std::size_t>(size) + 2;
  }
}

}  // namespace mosaic::server
