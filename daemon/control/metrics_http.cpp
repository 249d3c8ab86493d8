#include "control/metrics_http.hpp"

#include <arpa/inet.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <netinet/in.h>
#include <poll.h>
#include <stdexcept>
#include <string_view>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include <spdlog/spdlog.h>

#include "control/metrics_text.hpp"

namespace stoker::control {

using Clock = std::chrono::steady_clock;

namespace {

// One connection. States in order: reading the request head, writing the response, lingering
// (response handed to the kernel and SHUT_WR sent; the peer's input is discarded until it
// closes). `deadline` is that of the current state.
struct Connection {
  enum class State { kHead, kResponding, kLingering };
  int fd = -1;
  State state = State::kHead;
  Clock::time_point accepted;
  Clock::time_point deadline;
  std::string in;   // request head so far (< kMaxRequestBytes)
  std::string out;  // response, once decided
  std::size_t sent = 0;
  bool drop = false;  // closed at the end of this turn
};

bool transient(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

// Reads and throws away what the peer sent, at most `budget` bytes this turn (a peer that
// never stops sending cannot hold the thread). Marks the connection dropped at its EOF or error.
void discard_input(Connection& c, std::size_t budget = 256 * 1024) {
  char buf[4096];
  while (budget > 0) {
    const ssize_t r = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (r > 0) {
      budget -= std::min(budget, static_cast<std::size_t>(r));
      continue;
    }
    if (r == 0 || !transient(errno)) c.drop = true;
    return;
  }
}

// Writes what the socket takes; once the whole response is with the kernel, half-closes and
// lingers (the response is never cut by a reset: see the header's bounds).
void write_some(Connection& c) {
  while (c.sent < c.out.size()) {
    const ssize_t w = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w > 0) {
      c.sent += static_cast<std::size_t>(w);
      continue;
    }
    if (w < 0 && !transient(errno)) c.drop = true;
    return;
  }
  ::shutdown(c.fd, SHUT_WR);
  c.out.clear();
  c.out.shrink_to_fit();
  c.state = Connection::State::kLingering;
  c.deadline = Clock::now() + std::chrono::milliseconds(MetricsHttpServer::kLingerMs);
  discard_input(c);
}

// Closes after reading what is already queued (unless the peer is misbehaving, a close with
// unread input would reset the connection and lose the response's tail in flight).
void close_connection(Connection& c) {
  if (c.state == Connection::State::kLingering && !c.drop) discard_input(c);
  ::close(c.fd);
}

// Which connection to close when all are taken and another arrives: the oldest still sending
// its head, else the oldest lingering one; -1 when every one is writing a response.
int eviction_candidate(const std::vector<Connection>& conns) {
  int best = -1;
  for (int pass = 0; pass < 2 && best < 0; ++pass) {
    const auto want = pass == 0 ? Connection::State::kHead : Connection::State::kLingering;
    for (std::size_t i = 0; i < conns.size(); ++i) {
      if (conns[i].state == want && (best < 0 || conns[i].accepted < conns[static_cast<std::size_t>(best)].accepted)) {
        best = static_cast<int>(i);
      }
    }
  }
  return best;
}

std::string status_response(int code, const char* reason, const std::string& body, bool head_only,
                            const char* content_type = "text/plain; charset=utf-8") {
  std::string r = "HTTP/1.0 " + std::to_string(code) + " " + reason + "\r\nContent-Type: " + content_type +
                  "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  if (!head_only) r += body;
  return r;
}

}  // namespace

std::string metrics_http_response(std::string_view head, const std::string& document) {
  // Request line: METHOD SP TARGET SP HTTP/x.y (the headers after it are not needed).
  const std::size_t eol = head.find('\n');
  std::string_view line = head.substr(0, eol == std::string_view::npos ? head.size() : eol);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const std::size_t s1 = line.find(' ');
  const std::size_t s2 = s1 == std::string_view::npos ? s1 : line.find(' ', s1 + 1);
  if (s1 == std::string_view::npos || s2 == std::string_view::npos || line.find(' ', s2 + 1) != std::string_view::npos ||
      line.substr(s2 + 1, 5) != "HTTP/") {
    return status_response(400, "Bad Request", "bad request line\n", false);
  }
  const std::string_view method = line.substr(0, s1);
  std::string_view target = line.substr(s1 + 1, s2 - s1 - 1);
  target = target.substr(0, target.find('?'));  // Prometheus may add ?name[]=...; all is served
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) {
    return status_response(405, "Method Not Allowed", "only GET /metrics\n", false);
  }
  if (target != "/metrics") return status_response(404, "Not Found", "stokerd serves /metrics only\n", head_only);
  return status_response(200, "OK", document, head_only, kMetricsContentType);
}

MetricsHttpServer::MetricsHttpServer(const std::string& host, std::uint16_t port)
    : document_(std::make_shared<const std::string>()) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family = AF_INET;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    len = sizeof *v4;
  } else if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    family = AF_INET6;
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    len = sizeof *v6;
  } else {
    throw std::runtime_error("server.metrics: '" + host + "' is not a numeric address");
  }
  const std::string wanted = (family == AF_INET6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
  listen_fd_ = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) throw std::runtime_error("server.metrics: socket(): " + std::string(std::strerror(errno)));
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(listen_fd_, 64) != 0) {
    const std::string why = std::strerror(errno);
    ::close(listen_fd_);
    throw std::runtime_error("server.metrics: cannot listen on " + wanted + ": " + why);
  }
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  const std::uint16_t bound = ntohs(family == AF_INET ? v4->sin_port : v6->sin6_port);
  address_ = (family == AF_INET6 ? "[" + host + "]" : host) + ":" + std::to_string(bound);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    ::close(listen_fd_);
    throw std::runtime_error("server.metrics: eventfd(): " + std::string(std::strerror(errno)));
  }
  thread_ = std::thread([this] { run(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  stop_.store(true);
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
  thread_.join();
  ::close(wake_fd_);
  ::close(listen_fd_);
}

void MetricsHttpServer::publish(std::string text) {
  auto doc = std::make_shared<const std::string>(std::move(text));
  std::lock_guard lock(mu_);
  document_ = std::move(doc);
}

std::shared_ptr<const std::string> MetricsHttpServer::current() const {
  std::lock_guard lock(mu_);
  return document_;
}

void MetricsHttpServer::run() {
  std::vector<Connection> conns;
  conns.reserve(kMaxClients);
  Clock::time_point accept_paused_until{};
  std::vector<pollfd> fds;

  // Reads the head while the socket has bytes; decides the response once it is complete.
  auto read_head = [&](Connection& c) {
    char buf[1024];
    for (;;) {
      const ssize_t r = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (r == 0 || (r < 0 && !transient(errno))) {
        c.drop = true;  // gone before asking
        return;
      }
      if (r < 0) return;
      c.in.append(buf, static_cast<std::size_t>(r));
      const bool complete = c.in.find("\r\n\r\n") != std::string::npos || c.in.find("\n\n") != std::string::npos;
      if (complete) {
        c.out = metrics_http_response(c.in, *current());
      } else if (c.in.size() >= kMaxRequestBytes) {
        c.out = status_response(431, "Request Header Fields Too Large", "request head over 4096 bytes\n", false);
      } else {
        continue;
      }
      c.in.clear();
      c.in.shrink_to_fit();
      requests_++;
      c.state = Connection::State::kResponding;
      c.deadline = c.accepted + std::chrono::milliseconds(kDeadlineMs);
      write_some(c);
      return;
    }
  };

  while (!stop_.load()) {
    const auto now = Clock::now();
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    // The listening socket is watched only while a connection can be taken (room, or one to
    // close for it) and no EMFILE back-off runs: otherwise poll would report it readable
    // forever and the thread would spin.
    const bool room = conns.size() < kMaxClients || eviction_candidate(conns) >= 0;
    const bool accepting = room && now >= accept_paused_until;
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
    int timeout_ms = kDeadlineMs;
    for (const Connection& c : conns) {
      fds.push_back({c.fd, static_cast<short>(c.state == Connection::State::kResponding ? POLLOUT : POLLIN), 0});
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - now).count();
      timeout_ms = std::min<int>(timeout_ms, static_cast<int>(std::max<long long>(left, 0) + 1));
    }
    if (room && !accepting) timeout_ms = std::min(timeout_ms, 100);
    const int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) {
      spdlog::error("metrics endpoint: poll: {}; it stops serving", std::strerror(errno));
      break;
    }
    if (fds[0].revents != 0) break;  // stop
    // Existing connections first (their indexes match fds[2..]), then new ones.
    for (std::size_t i = 0; i < conns.size(); ++i) {
      Connection& c = conns[i];
      const short ev = fds[i + 2].revents;
      if (ev == 0) continue;
      switch (c.state) {
        case Connection::State::kHead: read_head(c); break;
        case Connection::State::kResponding: write_some(c); break;
        case Connection::State::kLingering: discard_input(c); break;
      }
    }
    // Failed, finished lingering or past the state's deadline: closed.
    const auto after = Clock::now();
    for (std::size_t i = 0; i < conns.size();) {
      Connection& c = conns[i];
      if (c.drop || after >= c.deadline) {
        close_connection(c);
        conns[i] = std::move(conns.back());
        conns.pop_back();
      } else {
        ++i;
      }
    }
    if (accepting && fds[1].revents != 0) {
      // Empties the backlog (bounded per turn), making room by eviction when all are taken.
      for (std::size_t taken = 0; taken < 4 * kMaxClients; ++taken) {
        if (conns.size() >= kMaxClients) {
          const int victim = eviction_candidate(conns);
          if (victim < 0) break;
          auto& v = conns[static_cast<std::size_t>(victim)];
          close_connection(v);
          v = std::move(conns.back());
          conns.pop_back();
        }
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            accept_paused_until = Clock::now() + std::chrono::milliseconds(100);
          }
          break;
        }
        Connection c;
        c.fd = fd;
        c.accepted = Clock::now();
        c.deadline = c.accepted + std::chrono::milliseconds(kHeadTimeoutMs);
        read_head(c);  // a scraper's request is usually queued already
        if (c.drop) {
          close_connection(c);
        } else {
          conns.push_back(std::move(c));
        }
      }
    }
  }
  for (Connection& c : conns) ::close(c.fd);
}

}  // namespace stoker::control
