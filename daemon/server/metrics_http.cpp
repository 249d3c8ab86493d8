#include "server/metrics_http.hpp"

#include <arpa/inet.h>
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

#include "server/metrics_text.hpp"

namespace stoker::server {

using Clock = std::chrono::steady_clock;

struct MetricsHttpServer::Client {
  int fd = -1;
  Clock::time_point deadline;
  std::string in;       // request head so far (< kMaxRequestBytes)
  std::string out;      // response, once decided
  std::size_t sent = 0;
  bool responding = false;
};

namespace {

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
  std::vector<Client> clients;
  clients.reserve(kMaxClients);
  Clock::time_point accept_paused_until{};
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    const auto now = Clock::now();
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    // The listening socket is watched only while there is room (and no EMFILE back-off):
    // otherwise poll would report it readable forever and the thread would spin.
    const bool accepting = clients.size() < kMaxClients && now >= accept_paused_until;
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
    int timeout_ms = kDeadlineMs;
    for (const Client& c : clients) {
      fds.push_back({c.fd, static_cast<short>(c.responding ? POLLOUT : POLLIN), 0});
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - now).count();
      timeout_ms = std::min<int>(timeout_ms, static_cast<int>(std::max<long long>(left, 0) + 1));
    }
    if (!accepting && clients.size() < kMaxClients) timeout_ms = std::min(timeout_ms, 100);
    const int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) {
      spdlog::error("metrics endpoint: poll: {}; it stops serving", std::strerror(errno));
      break;
    }
    if (fds[0].revents != 0) break;  // stop
    // Existing connections first (their indexes match fds[2..]), then new ones.
    for (std::size_t i = 0; i < clients.size(); ++i) {
      Client& c = clients[i];
      const short ev = fds[i + 2].revents;
      if (ev == 0) continue;
      if (!c.responding) {
        char buf[1024];
        const ssize_t r = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          c.deadline = Clock::time_point{};  // gone before asking: dropped below
          continue;
        }
        if (r > 0) c.in.append(buf, static_cast<std::size_t>(r));
        const bool complete = c.in.find("\r\n\r\n") != std::string::npos || c.in.find("\n\n") != std::string::npos;
        if (complete) {
          c.out = metrics_http_response(c.in, *current());
          c.responding = true;
        } else if (c.in.size() >= kMaxRequestBytes) {
          c.out = status_response(431, "Request Header Fields Too Large", "request head over 4096 bytes\n", false);
          c.responding = true;
        }
        if (c.responding) {
          c.in.clear();
          c.in.shrink_to_fit();
          requests_++;
        }
      } else if (ev & (POLLOUT | POLLERR | POLLHUP)) {
        const ssize_t w = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0) c.sent += static_cast<std::size_t>(w);
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) c.deadline = Clock::time_point{};
      }
    }
    // Done, failed or past the deadline: closed (a response is never half-kept).
    const auto after = Clock::now();
    for (std::size_t i = 0; i < clients.size();) {
      Client& c = clients[i];
      const bool done = c.responding && c.sent == c.out.size();
      if (done || after >= c.deadline) {
        if (done) ::shutdown(c.fd, SHUT_WR);
        ::close(c.fd);
        clients[i] = std::move(clients.back());
        clients.pop_back();
      } else {
        ++i;
      }
    }
    if (accepting && fds[1].revents != 0) {
      while (clients.size() < kMaxClients) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            accept_paused_until = Clock::now() + std::chrono::milliseconds(100);
          }
          break;
        }
        Client c;
        c.fd = fd;
        c.deadline = Clock::now() + std::chrono::milliseconds(kDeadlineMs);
        clients.push_back(std::move(c));
      }
    }
  }
  for (Client& c : clients) ::close(c.fd);
}

}  // namespace stoker::server
