#include "http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>

namespace mosaic::test {

int connect_to(int port, int timeout_s, int receive_buffer, const char* from) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (receive_buffer > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (from && (::inet_pton(AF_INET, from, &a.sin_addr) != 1 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)) {
    ::close(fd);
    return -1;
  }
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& bytes) {
  for (std::size_t at = 0; at < bytes.size();) {
    const ssize_t n = ::send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += static_cast<std::size_t>(n);
  }
  return true;
}

std::string read_all(int fd, std::size_t chunk) {
  std::string out;
  std::vector<char> buf(chunk);
  for (;;) {
    const ssize_t n = ::recv(fd, buf.data(), chunk, 0);
    if (n <= 0) break;
    out.append(buf.data(), static_cast<std::size_t>(n));
  }
  return out;
}

std::string http_request(const std::string& method, const std::string& target, const std::string& body) {
  std::string r = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  if (!body.empty() || method == "POST") r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

std::vector<std::string> Response::events() const {
  std::vector<std::string> out;
  for (std::size_t at = 0; at < body.size();) {
    const std::size_t end = body.find("\n\n", at);
    const std::string e = body.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (e.starts_with("data: ")) out.push_back(e.substr(6));
    if (end == std::string::npos) break;
    at = end + 2;
  }
  return out;
}

Response parse_response(const std::string& raw) {
  Response r;
  const std::size_t head_end = raw.find("\r\n\r\n");
  if (!raw.starts_with("HTTP/1.1 ") || head_end == std::string::npos) return r;
  r.status = std::stoi(raw.substr(9, 3));
  for (std::size_t at = raw.find("\r\n") + 2; at < head_end;) {
    const std::size_t eol = raw.find("\r\n", at), colon = raw.find(':', at);
    if (colon < eol) {
      std::string name = raw.substr(at, colon - at);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      r.headers[name] = raw.substr(colon + 2, eol - colon - 2);
    }
    at = eol + 2;
  }
  std::string body = raw.substr(head_end + 4);
  if (r.headers["transfer-encoding"] == "chunked") {
    std::string plain;
    for (std::size_t at = 0; at < body.size();) {
      const std::size_t eol = body.find("\r\n", at);
      if (eol == std::string::npos) break;
      const std::size_t n = std::stoul(body.substr(at, eol - at), nullptr, 16);
      if (n == 0) break;
      plain += body.substr(eol + 2, n);
      at = eol + 2 + n + 2;
    }
    body = plain;
  }
  r.body = body;
  return r;
}

Response ask(int port, const std::string& request, int timeout_s, bool then_close) {
  const int fd = connect_to(port, timeout_s);
  if (fd < 0) return {};
  Response r;
  if (send_all(fd, request)) {
    if (then_close) ::shutdown(fd, SHUT_WR);
    r = parse_response(read_all(fd));
  }
  ::close(fd);
  return r;
}

}  // namespace mosaic::test
