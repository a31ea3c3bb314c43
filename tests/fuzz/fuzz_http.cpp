// Bytes from a connection → the server's request framing (server/request_framing), then, for a whole
// request, cpp-httplib's parser and routing as the server hands it requests, and the OpenAI decoder
// on the body. Properties: framing says the same of a request whatever follows it, a proper prefix of
// a whole request is never whole, a refusal has a 4xx/501 status and a reason, and whatever a whole
// request holds, the router answers with an HTTP response.
#include <httplib.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_target.h"
#include "server/openai_api.h"
#include "server/request_framing.h"

namespace {

using mosaic::server::Framed;

// A request read from memory, the response written to memory.
class MemoryStream final : public httplib::Stream {
 public:
  explicit MemoryStream(std::string_view in) : in_(in) {}
  bool is_readable() const override { return at_ < in_.size(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* p, size_t n) override {
    n = std::min(n, in_.size() - at_);
    std::memcpy(p, in_.data() + at_, n);
    at_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* p, size_t n) override {
    out.append(p, n);
    return static_cast<ssize_t>(n);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 1;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 2;
  }
  socket_t socket() const override { return 0; }
  std::string out;

 private:
  std::string_view in_;
  std::size_t at_ = 0;
};

// The server's routes in little: a body decoded as the OpenAI API, refusals answered in its shape.
class Router : public httplib::Server {
 public:
  Router() {
    svr_sock_ = 0;  // as the server's router: never "shutting down"
    set_payload_max_length(8192);
    Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("{}", "application/json"); });
    auto decode = [](bool chat) {
      return [chat](const httplib::Request& req, httplib::Response& res) {
        try {
          const auto r = mosaic::server::parse_request(req.body, chat);
          res.set_content(mosaic::server::wire(mosaic::server::completion_body(r, "cmpl-1", 0, r.prompt_text, "stop", {1, 1})), "application/json");
        } catch (const mosaic::server::ApiError& e) {
          res.status = e.status;
          res.set_content(mosaic::server::wire(mosaic::server::error_body(e)), "application/json");
        }
      };
    };
    Post("/v1/completions", decode(false));
    Post("/v1/chat/completions", decode(true));
  }
  bool serve(httplib::Stream& s, bool& closed) { return process_request(s, false, closed, nullptr); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in = mosaic::fuzz::as_text(data, size);
  const mosaic::server::FramingLimits limits{.max_head = 4096, .max_body = 8192};
  const Framed f = mosaic::server::frame_request(in, limits);
  if (f.state == Framed::State::Refused) {
    if (f.why.empty() || !(f.status == 400 || f.status == 413 || f.status == 431 || f.status == 501))
      mosaic::fuzz::violated("a refusal without a reason or with another status");
    return 0;
  }
  if (f.state == Framed::State::Incomplete) return 0;
  if (f.bytes == 0 || f.skip + f.bytes > size || !f.head_whole || f.method.empty() || f.target.empty())
    mosaic::fuzz::violated("a whole request outside the bytes it was read from");
  const std::size_t end = f.skip + f.bytes;
  const Framed alone = mosaic::server::frame_request(in.substr(0, end), limits);
  if (alone.state != Framed::State::Complete || alone.bytes != f.bytes) mosaic::fuzz::violated("framing depends on what follows the request");
  if (mosaic::server::frame_request(in.substr(0, end - 1), limits).state == Framed::State::Complete)
    mosaic::fuzz::violated("a proper prefix of a request is whole");

  std::string request(in.substr(f.skip, f.bytes));
  if (f.expect_continue) request.erase(f.expect_at, f.expect_bytes);
  static Router router;
  MemoryStream stream(request);
  bool closed = false;
  router.serve(stream, closed);
  if (!stream.out.starts_with("HTTP/1.1 ")) mosaic::fuzz::violated("a whole request got no HTTP response");
  return 0;
}
