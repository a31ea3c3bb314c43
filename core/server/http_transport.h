#pragma once
// The server's connections, kept so that clients the server does not control cannot starve it. One
// thread reads every connection (epoll) until a request is whole — a client that sends slowly holds a
// buffer, not a thread — with a time limit on each request's head and body (408 past it) and on an idle
// connection; connections are capped per client address and in total, and at a cap the slowest reader
// gives way to the new connection (past an address's cap a few more are taken for light requests
// alone, so that a monitor behind the same proxy as the load is answered). A whole request goes to a
// worker, which answers it through the HTTP library (cpp-httplib's parser and routing), then hands the
// connection back. Cheap requests (/health, /metrics) have workers of their own, so they answer while
// every other worker streams.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace httplib {
class Stream;
}

namespace mosaic::server {

struct TransportOptions {
  std::size_t max_head_bytes = 64 << 10;
  std::size_t max_body_bytes = 1 << 20;
  std::size_t workers = 16;             // for requests that are not light
  std::size_t light_workers = 2;        // for light ones
  double read_timeout_seconds = 10;     // a request's head and body, from its first byte
  double idle_timeout_seconds = 5;      // a connection with no request begun
  double write_timeout_seconds = 10;    // each write of a response
  std::size_t max_connections = 512;    // in total (each an open file)
  std::size_t max_per_client = 256;      // from one address
};

struct TransportCounts {
  std::int64_t open = 0;       // connections now
  std::int64_t refused = 0;    // turned away at a cap with nothing slower to give way
  std::int64_t evicted = 0;    // closed at a cap to make room (the slowest reader)
  std::int64_t timed_out = 0;  // requests not whole within the read timeout (408)
  std::int64_t malformed = 0;  // requests refused before a worker saw them (400, 413, 431, 501)
};

class HttpTransport {
 public:
  // Answers one whole request read from `stream` (`close`: the response must close the connection;
  // set `closed` when it does). False: close the connection.
  using Handle = std::function<bool(httplib::Stream& stream, bool close, bool& closed)>;
  // A whole response (status line, headers, body) refusing a request the transport does not hand on.
  using Refusal = std::function<std::string(int status, const std::string& why)>;
  // Whether a request goes to the light workers.
  using Light = std::function<bool(std::string_view method, std::string_view target)>;

  HttpTransport(TransportOptions options, Handle handle, Light light, Refusal refusal);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Listens on host:port (0: any free port); returns the port. Throws IoError.
  int bind(const std::string& host, int port);
  // Serves until stop(); returns once every connection is closed and every worker has ended.
  void run();
  // Closes the listener and every connection (a worker writing to one fails its write), and waits
  // for run() to return. Thread-safe, idempotent; before run() it only closes the listener.
  void stop();
  TransportCounts counts() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mosaic::server
