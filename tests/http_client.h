#pragma once
// A bare HTTP/1.1 client over loopback TCP, for tests that must see exactly what the server sends
// (status, headers, de-chunked body, server-sent events) and control how they read it.
#include <map>
#include <string>
#include <vector>

namespace mosaic::test {

// A TCP connection to 127.0.0.1:port that gives up reading after `timeout_s` (-1 when it fails).
// `from`: the loopback address it comes from (e.g. "127.0.0.2": another client to the server's caps).
int connect_to(int port, int timeout_s = 60, int receive_buffer = 0, const char* from = nullptr);
bool send_all(int fd, const std::string& bytes);
// Reads until the server closes (or the read times out), `chunk` bytes per call.
std::string read_all(int fd, std::size_t chunk = 65536);
std::string http_request(const std::string& method, const std::string& target, const std::string& body = {});

struct Response {
  int status = 0;  // 0: no response (the connection failed or closed first)
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;                            // de-chunked
  // A streamed body's server-sent events, without their "data: " prefix.
  std::vector<std::string> events() const;
};

Response parse_response(const std::string& raw);
// Sends `request` and reads the answer; `then_close` half-closes after sending, as a client that
// has nothing more to say (the server need not wait out its read timeout for the rest).
Response ask(int port, const std::string& request, int timeout_s = 60, bool then_close = false);

}  // namespace mosaic::test
