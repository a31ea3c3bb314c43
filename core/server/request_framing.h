#pragma once
// Where an HTTP/1.1 request ends in the bytes a connection has sent so far, without reading it: the
// head up to its blank line, then a body of Content-Length bytes or in chunks. The server reads a
// request whole before a worker thread takes it, so a client that sends slowly costs a buffer, not a
// thread; this says when it is whole, or why it never will be (refused with the status to answer).
#include <cstddef>
#include <string>
#include <string_view>

namespace mosaic::server {

struct FramingLimits {
  std::size_t max_head = 64 << 10;   // request line and headers
  std::size_t max_body = 1 << 20;    // Content-Length, or the chunks' data together
};

struct Framed {
  enum class State { Incomplete, Complete, Refused };
  State state = State::Incomplete;
  std::size_t skip = 0;   // blank lines before the request line (RFC 9112 §2.2 lets a server ignore them)
  std::size_t bytes = 0;  // Complete: the request's bytes after `skip`, head and body
  int status = 0;         // Refused: 400, 413, 431 or 501
  std::string why;        // Refused: what is wrong, for the client
  std::string method, target;  // from the request line, once the head is whole
  // The head is whole (the body may not be yet), and it asks for `Expect: 100-continue`: the server
  // answers "100 Continue" itself so that the client sends its body at once, and drops the header
  // (expect_at, expect_bytes: its line, CRLF included, after `skip`) before the request is handled.
  bool head_whole = false, expect_continue = false;
  std::size_t expect_at = 0, expect_bytes = 0;
};

// The request at the start of `buffer`. Refuses what could smuggle a second request past a proxy
// (Content-Length and Transfer-Encoding together, differing lengths) and what it cannot frame (a
// transfer coding other than chunked, a folded header, a line without a colon), as RFC 9112 asks.
Framed frame_request(std::string_view buffer, const FramingLimits& limits);

}  // namespace mosaic::server
