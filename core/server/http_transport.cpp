#include "server/http_transport.h"

#include <httplib.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "server/request_framing.h"

namespace mosaic::server {
namespace {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds ms(double seconds) { return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000)); }

// Waits up to `wait` for `events` on `fd`: its revents, 0 on timeout.
short wait_for(int fd, short events, std::chrono::milliseconds wait) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int n = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(0, wait.count())));
    if (n < 0 && errno == EINTR) continue;
    return n > 0 ? p.revents : 0;
  }
}

}  // namespace

// Named, not anonymous: HttpTransport::Impl holds these, and a class with linkage holding types
// without it is what GCC's -Wsubobject-linkage flags (in the unity build, where this file reads as a
// header).
namespace http_transport_parts {

// One whole request, answered through httplib: reads come from the bytes the poller read (and end
// there), writes go to the socket, each within the write timeout.
class BufferedStream final : public httplib::Stream {
 public:
  BufferedStream(int fd, std::string_view request, std::string ip, int port, double write_timeout)
      : fd_(fd), request_(request), ip_(std::move(ip)), port_(port), write_timeout_(ms(write_timeout)) {}

  bool is_readable() const override { return at_ < request_.size(); }
  bool is_writable() const override {
    const short r = wait_for(fd_, POLLOUT, write_timeout_);
    return (r & POLLOUT) && !(r & (POLLERR | POLLHUP));
  }
  ssize_t read(char* ptr, size_t size) override {
    const std::size_t n = std::min(size, request_.size() - at_);
    std::memcpy(ptr, request_.data() + at_, n);
    at_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    std::size_t done = 0;
    const auto give_up = Clock::now() + write_timeout_;
    while (done < size) {
      const ssize_t w = ::send(fd_, ptr + done, size - done, MSG_NOSIGNAL);
      if (w > 0) {
        done += static_cast<std::size_t>(w);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - Clock::now());
        if (left.count() <= 0 || !(wait_for(fd_, POLLOUT, left) & POLLOUT)) return -1;
        continue;
      }
      return -1;  // the client is gone (EPIPE, ECONNRESET), or the server shut the socket down
    }
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = ip_;
    port = port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage sa{};
    socklen_t len = sizeof sa;
    ip.clear();
    port = 0;
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return;
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (::getnameinfo(reinterpret_cast<sockaddr*>(&sa), len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host;
      port = std::atoi(serv);
    }
  }
  socket_t socket() const override { return fd_; }

 private:
  int fd_;
  std::string_view request_;
  std::size_t at_ = 0;
  std::string ip_;
  int port_;
  std::chrono::milliseconds write_timeout_;
};

struct Conn {
  int fd = -1;
  std::string addr;
  int port = 0;
  std::string buf;
  bool busy = false;           // a worker has it
  bool started = false;        // a byte of the next request has come
  bool peer_closed = false;    // the client sent all it will
  bool continue_sent = false;  // "100 Continue" answered for the request being read
  bool lingering = false;      // refused and answered: what still comes is dropped until the client closes
  bool over_cap = false;       // taken past its address's cap, for light requests alone (kMonitorRoom)
  Clock::time_point since;     // idle since, the request's first byte, or the refusal
};

// A connection a worker is done with: back to reading (with what came after the request), or closed.
struct Returned {
  int fd = -1;
  bool keep = false;
  std::string leftover;
};

}  // namespace http_transport_parts
using http_transport_parts::BufferedStream;
using http_transport_parts::Conn;
using http_transport_parts::Returned;

struct HttpTransport::Impl {
  TransportOptions opt;
  Handle handle;
  Light light;
  Refusal refusal;
  FramingLimits limits;
  int listen_fd = -1, epoll_fd = -1, wake_fd = -1;

  // The poller's own.
  std::unordered_map<int, Conn> conns;
  std::map<std::string, std::size_t> per_addr, over_cap_per_addr;
  std::size_t busy = 0;
  bool accepting = true;
  Clock::time_point accept_again;
  std::unique_ptr<httplib::ThreadPool> workers, light_workers;

  std::mutex returned_m;
  std::vector<Returned> returned;

  std::mutex run_m;
  std::condition_variable run_cv;
  bool stopping = false, running = false;
  std::atomic<bool> stop_flag{false};

  std::atomic<std::int64_t> open{0}, refused{0}, evicted{0}, timed_out{0}, malformed{0};

  void wake() const {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(wake_fd, &one, sizeof one);
  }

  // What a refusal says, sent without waiting: a client too slow to take it loses it. What the client
  // has sent is read and dropped first, as far as it has come: closing a socket with unread bytes
  // resets the connection, and a reset can reach the client before the answer does.
  void refuse(int fd, int status, const std::string& why) const {
    const std::string r = refusal(status, why);
    [[maybe_unused]] const auto n = ::send(fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(fd, SHUT_WR);
    char sink[1 << 14];
    for (std::size_t dropped = 0; dropped < opt.max_head_bytes + opt.max_body_bytes;) {
      const ssize_t got = ::recv(fd, sink, sizeof sink, MSG_DONTWAIT);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      dropped += static_cast<std::size_t>(got);
    }
  }

  // A request's bytes have come on `fd` and are not read yet.
  static bool pending(int fd) {
    char byte;
    return ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }

  // Past an address's cap, this many more of its connections are taken for light requests alone
  // (/health, /metrics, /v1/models): a monitor that shares the address of the load it watches (a
  // reverse proxy's, or localhost) is answered while that load holds the cap, instead of being told
  // the server is full exactly when it is busy. Any other request on them is refused with a 503.
  static constexpr std::size_t kMonitorRoom = 4;

  static constexpr char kAddressFull[] = "this address holds as many connections as one client may; retry shortly";

  // Where an address's connection was taken: within its cap, or past it (kMonitorRoom).
  enum class Room { within_cap, over_cap };

  // One connection of `addr` fewer in `counts` (per_addr or over_cap_per_addr).
  static void uncount(std::map<std::string, std::size_t>& counts, const std::string& addr) {
    if (auto a = counts.find(addr); a != counts.end() && --a->second == 0) counts.erase(a);
  }

  // Whether `addr` may open one more connection past its cap: within kMonitorRoom, or once one of
  // those it has gives way as `evict` chooses (refused and lingering, idle, or the slowest to arrive):
  // else a burst's overflow, refused or idle, would hold the room the monitor needs.
  bool monitor_room(const std::string& addr) {
    const auto n = over_cap_per_addr.find(addr);
    return n == over_cap_per_addr.end() || n->second < kMonitorRoom || evict(&addr, Room::over_cap);
  }

  // An over-cap connection whose address has room again is an ordinary one from now on (a proxy
  // keeps the connection its health check opened, and sends it anything next).
  void within_cap(Conn& c) {
    uncount(over_cap_per_addr, c.addr);
    ++per_addr[c.addr];
    c.over_cap = false;
  }

  void close_conn(int fd) {
    const auto it = conns.find(fd);
    if (it == conns.end()) return;
    if (it->second.busy) --busy;
    uncount(it->second.over_cap ? over_cap_per_addr : per_addr, it->second.addr);
    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    ::close(fd);
    conns.erase(it);
    --open;
  }

  // Refuses the request on `c` and keeps reading what the client still sends, dropping it, until the
  // client closes or kLinger passes (nginx's lingering close). Closing at once would reset a
  // connection whose client is still sending (a body over the limit, still arriving), and the reset
  // can overtake the answer: the client would see "connection reset" instead of a 413.
  static constexpr auto kLinger = std::chrono::seconds(2);
  void refuse_and_linger(Conn& c, int status, const std::string& why) {
    refuse(c.fd, status, why);
    c.lingering = true;
    c.buf.clear();
    c.since = Clock::now();
  }

  // Drops what a lingering connection's client sends; closes it at the client's end or an error.
  void drop_from(Conn& c) {
    char sink[1 << 16];
    for (;;) {
      const ssize_t n = ::recv(c.fd, sink, sizeof sink, 0);
      if (n > 0) continue;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      return close_conn(c.fd);
    }
  }

  // At a cap, of `addr` when given: a connection idle between requests gives way, else the request
  // that has been arriving longest (told so with a 503). Only one settled for a second: a fresh
  // connection's request may be on the wire (a client's burst is accepted before any of it is read),
  // and closing it unanswered would lose that request, so the newcomer is refused instead, with an
  // answer. False when none can give way. At an address's cap only a connection of the same room
  // gives way (one taken past the cap frees no room within it, and the other way round); at the
  // total cap (no `addr`) any connection may, whatever `room` says.
  bool evict(const std::string* addr, Room room = Room::within_cap) {
    const auto settled = Clock::now() - std::chrono::seconds(1);
    const Conn* victim = nullptr;
    for (const auto& [fd, c] : conns) {
      if (addr && (c.addr != *addr || c.over_cap != (room == Room::over_cap))) continue;
      if (c.lingering) {  // answered already: it gives way first
        victim = &c;
        break;
      }
      if (c.busy || c.since > settled) continue;
      if (!c.started && pending(fd)) continue;  // a request came, unread yet: the next poll reads it
      if (!victim || (c.started < victim->started) || (c.started == victim->started && c.since < victim->since)) victim = &c;
    }
    if (!victim) return false;
    if (victim->started && !victim->lingering)
      refuse(victim->fd, 503,
             std::string(addr ? "this address holds as many connections as one client may" : "the server holds as many connections as it takes") +
                 ", and the slowest request in progress gave way to a new connection; retry");
    ++evicted;
    close_conn(victim->fd);
    return true;
  }

  // Takes what connections wait, at most kAcceptsPerWake (the listener is level-triggered: the rest
  // wake the next poll), so that a flood of connects cannot hold the poller away from the requests
  // and timeouts of the connections it has.
  static constexpr int kAcceptsPerWake = 64;
  void accept_waiting() {
    for (int taken = 0; taken < kAcceptsPerWake; ++taken) {
      sockaddr_storage sa{};
      socklen_t len = sizeof sa;
      const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE) {
          // Out of files: make room if a slow reader can give way, else listen again in a moment.
          if (evict(nullptr)) continue;
          ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
          accepting = false;
          accept_again = Clock::now() + std::chrono::milliseconds(100);
        }
        return;
      }
      char host[NI_MAXHOST] = "", serv[NI_MAXSERV] = "0";
      ::getnameinfo(reinterpret_cast<sockaddr*>(&sa), len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV);
      const std::string addr = host;
      // The client's own cap first: a connection of another client gives way only to a newcomer that will be taken.
      bool client_full = per_addr[addr] >= opt.max_per_client && !evict(&addr), over_cap = false;
      if (client_full) client_full = !(over_cap = monitor_room(addr));
      // A connection past its address's cap makes no other client's give way at the total cap.
      const bool full = !client_full && conns.size() >= opt.max_connections && (over_cap || !evict(nullptr));
      if (per_addr[addr] == 0 && (full || client_full)) per_addr.erase(addr);
      if (full || client_full) {
        ++refused;
        refuse(fd, 503, full ? "the server holds as many connections as it takes; retry shortly" : kAddressFull);
        ::close(fd);
        continue;
      }
      const int yes = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);  // streams write one small event a token
      Conn& c = conns[fd];
      c.fd = fd;
      c.addr = addr;
      c.port = std::atoi(serv);
      c.since = Clock::now();
      c.over_cap = over_cap;
      ++(over_cap ? over_cap_per_addr : per_addr)[addr];
      ++open;
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.fd = fd;
      ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
    }
  }

  void read_from(Conn& c) {
    if (c.lingering) return drop_from(c);
    char chunk[1 << 16];
    const std::size_t most = opt.max_head_bytes + opt.max_body_bytes + (1 << 16);
    for (;;) {
      const ssize_t n = ::recv(c.fd, chunk, sizeof chunk, 0);
      if (n > 0) {
        if (!c.started) {
          c.started = true;
          c.since = Clock::now();
        }
        c.buf.append(chunk, static_cast<std::size_t>(n));
        if (c.buf.size() > most) break;  // framing refuses it
        continue;
      }
      if (n == 0) c.peer_closed = true;
      else if (errno == EINTR) continue;
      else if (errno != EAGAIN && errno != EWOULDBLOCK) return close_conn(c.fd);
      break;
    }
    dispatch(c);
  }

  // Hands a whole request to a worker; answers "100 Continue" for a head that asks; refuses what can
  // never be framed.
  void dispatch(Conn& c) {
    const Framed f = frame_request(c.buf, limits);
    if (f.state == Framed::State::Refused) {
      ++malformed;
      return refuse_and_linger(c, f.status, f.why);
    }
    // Past its address's cap a connection serves light requests alone, refused as soon as the head
    // says otherwise (before a "100 Continue" asks for the body).
    if (f.head_whole && c.over_cap) {
      const auto held = per_addr.find(c.addr);
      if (held == per_addr.end() || held->second < opt.max_per_client) {
        within_cap(c);
      } else if (!light(f.method, f.target)) {
        ++refused;
        return refuse_and_linger(c, 503, kAddressFull);
      }
    }
    if (f.state == Framed::State::Incomplete) {
      if (c.peer_closed) return close_conn(c.fd);
      if (f.head_whole && f.expect_continue && !c.continue_sent) {
        static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
        [[maybe_unused]] const auto n = ::send(c.fd, kContinue, sizeof kContinue - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        c.continue_sent = true;
      }
      return;
    }
    std::string buf = std::move(c.buf);
    buf.erase(0, f.skip);
    std::size_t bytes = f.bytes;
    if (f.expect_continue) {  // answered here (or the body came with the head): httplib must not answer it again
      buf.erase(f.expect_at, f.expect_bytes);
      bytes -= f.expect_bytes;
    }
    c.buf.clear();
    c.busy = true;
    c.continue_sent = false;
    ++busy;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
    httplib::ThreadPool& pool = light(f.method, f.target) ? *light_workers : *workers;
    pool.enqueue([this, fd = c.fd, buf = std::move(buf), bytes, addr = c.addr, port = c.port, peer_closed = c.peer_closed]() mutable {
      BufferedStream stream(fd, std::string_view(buf).substr(0, bytes), addr, port, opt.write_timeout_seconds);
      bool closed = false, ok = false;
      const bool close = peer_closed || stop_flag;
      try {
        ok = handle(stream, close, closed);
      } catch (...) {
      }
      Returned r{fd, ok && !closed && !close && !stop_flag, buf.substr(bytes)};
      {
        std::lock_guard lock(returned_m);
        returned.push_back(std::move(r));
      }
      wake();
    });
  }

  void take_returned() {
    std::vector<Returned> back;
    {
      std::lock_guard lock(returned_m);
      back.swap(returned);
    }
    for (Returned& r : back) {
      const auto it = conns.find(r.fd);
      if (it == conns.end()) continue;
      Conn& c = it->second;
      c.busy = false;
      --busy;
      if (!r.keep || stop_flag) {
        close_conn(r.fd);
        continue;
      }
      c.buf = std::move(r.leftover);
      c.started = !c.buf.empty();
      c.since = Clock::now();
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.fd = c.fd;
      ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, c.fd, &ev);
      if (c.started) dispatch(c);  // a pipelined request came with the last one
    }
  }

  // Requests that did not arrive whole in time get 408 (and linger); idle connections, and lingering
  // ones past kLinger, are closed. Returns how long until the next deadline.
  std::chrono::milliseconds expire() {
    const auto now = Clock::now();
    auto next = now + std::chrono::seconds(1);
    if (!accepting && now >= accept_again) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = listen_fd;
      ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &ev);
      accepting = true;
    }
    std::vector<int> late;
    for (const auto& [fd, c] : conns) {
      if (c.busy) continue;
      const auto due = c.since + (c.lingering ? kLinger : ms(c.started ? opt.read_timeout_seconds : opt.idle_timeout_seconds));
      if (due <= now) late.push_back(fd);
      else next = std::min(next, due);
    }
    for (int fd : late) {
      Conn& c = conns[fd];
      if (c.started && !c.lingering) {
        ++timed_out;
        refuse_and_linger(c, 408, "the request did not arrive whole within " + std::to_string(static_cast<int>(opt.read_timeout_seconds)) + " s");
        next = std::min(next, c.since + kLinger);
        continue;
      }
      close_conn(fd);
    }
    return std::max(std::chrono::milliseconds(5), std::chrono::duration_cast<std::chrono::milliseconds>(next - now));
  }

  void loop() {
    epoll_event events[64];
    while (!stop_flag) {
      const auto wait = expire();
      const int n = ::epoll_wait(epoll_fd, events, 64, static_cast<int>(wait.count()));
      for (int i = 0; i < n && !stop_flag; ++i) {
        const int fd = events[i].data.fd;
        if (fd == listen_fd) accept_waiting();
        else if (fd == wake_fd) {
          std::uint64_t count = 0;
          [[maybe_unused]] const auto r = ::read(wake_fd, &count, sizeof count);
          take_returned();
        } else if (const auto it = conns.find(fd); it != conns.end() && !it->second.busy) {
          read_from(it->second);
        }
      }
    }
    // Stopping: nothing new; idle and reading connections closed at once; a worker's connection shut
    // down under it (its writes fail, which ends what it serves) and closed when it hands it back.
    if (listen_fd >= 0) {
      ::close(listen_fd);
      listen_fd = -1;
    }
    std::vector<int> idle;
    for (const auto& [fd, c] : conns) {
      if (c.busy) ::shutdown(fd, SHUT_RDWR);
      else idle.push_back(fd);
    }
    for (int fd : idle) close_conn(fd);
    while (busy > 0) {
      wait_for(wake_fd, POLLIN, std::chrono::milliseconds(100));
      std::uint64_t count = 0;
      [[maybe_unused]] const auto r = ::read(wake_fd, &count, sizeof count);
      take_returned();
    }
    workers->shutdown();
    light_workers->shutdown();
  }
};

HttpTransport::HttpTransport(TransportOptions options, Handle handle, Light light, Refusal refusal) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.opt = options;
  s.handle = std::move(handle);
  s.light = std::move(light);
  s.refusal = std::move(refusal);
  s.limits = {options.max_head_bytes, options.max_body_bytes};
  s.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  s.epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (s.wake_fd < 0 || s.epoll_fd < 0) throw IoError("HTTP server", "", std::string("cannot make its event loop: ") + std::strerror(errno));
}

HttpTransport::~HttpTransport() {
  stop();
  Impl& s = *impl_;
  if (s.listen_fd >= 0) ::close(s.listen_fd);
  ::close(s.epoll_fd);
  ::close(s.wake_fd);
}

int HttpTransport::bind(const std::string& host, int port) {
  Impl& s = *impl_;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string where = host + ":" + std::to_string(port);
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found)
    throw IoError(where, "", "is not an address of this machine", "choose another --host");
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    // A burst of clients connecting at once: with a short queue SYNs are lost and each waits out
    // TCP's retry (1 s, then 3 s …) before it is even heard.
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) throw IoError(where, "", "cannot be listened on (in use, or not an address of this machine)", "choose another --port or --host");
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  char serv[NI_MAXSERV] = "0";
  ::getnameinfo(reinterpret_cast<sockaddr*>(&sa), len, nullptr, 0, serv, sizeof serv, NI_NUMERICSERV);
  s.listen_fd = fd;
  return std::atoi(serv);
}

void HttpTransport::run() {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.run_m);
    if (s.stopping || s.listen_fd < 0) return;
    s.running = true;
  }
  s.workers = std::make_unique<httplib::ThreadPool>(std::max<std::size_t>(1, s.opt.workers));
  s.light_workers = std::make_unique<httplib::ThreadPool>(std::max<std::size_t>(1, s.opt.light_workers));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = s.listen_fd;
  ::epoll_ctl(s.epoll_fd, EPOLL_CTL_ADD, s.listen_fd, &ev);
  ev.data.fd = s.wake_fd;
  ::epoll_ctl(s.epoll_fd, EPOLL_CTL_ADD, s.wake_fd, &ev);
  s.loop();
  std::lock_guard lock(s.run_m);
  s.running = false;
  s.run_cv.notify_all();
}

void HttpTransport::stop() {
  Impl& s = *impl_;
  std::unique_lock lock(s.run_m);
  s.stopping = true;
  s.stop_flag = true;
  s.wake();
  s.run_cv.wait(lock, [&] { return !s.running; });
}

TransportCounts HttpTransport::counts() const {
  const Impl& s = *impl_;
  return {s.open.load(), s.refused.load(), s.evicted.load(), s.timed_out.load(), s.malformed.load()};
}

}  // namespace mosaic::server
