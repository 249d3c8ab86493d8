// The /metrics responder (control/metrics_http.hpp) over real loopback sockets, without a daemon
// (issue 24, C6): monitoring must not be starved by slow peers, and a response must reach the
// client whole even when the client sent more than its request.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "control/metrics_http.hpp"

using stoker::control::MetricsHttpServer;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

int port_of(const MetricsHttpServer& s) { return std::stoi(s.address().substr(s.address().rfind(':') + 1)); }

// A non-blocking connect (a full backlog must not block the test); -1 when it fails at once.
int connect_nonblocking(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  return fd;
}

struct Exchange {
  std::string reply;
  int error = 0;  // errno of a failed recv (ECONNRESET: the response was cut)
  bool timed_out = false;
};

// Sends all of `bytes` (false on an error, kept in x.error).
bool send_all(int fd, const std::string& bytes, Clock::time_point until, Exchange& x) {
  std::size_t sent = 0;
  while (sent < bytes.size() && Clock::now() < until) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t w = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (w > 0) sent += static_cast<std::size_t>(w);
    if (w < 0 && errno != EAGAIN && errno != EINPROGRESS && errno != ENOTCONN) {
      x.error = errno;
      return false;
    }
  }
  return true;
}

// Connects, sends `request`, then `later` after 50 ms (when there is one), waits `pause`
// without reading, then reads until the server closes (or `limit` passes).
Exchange exchange(int port, const std::string& request, std::chrono::milliseconds limit,
                  std::chrono::milliseconds pause = 0ms, const std::string& later = "") {
  Exchange x;
  const auto until = Clock::now() + limit;
  const int fd = connect_nonblocking(port);
  REQUIRE(fd >= 0);
  bool ok = send_all(fd, request, until, x);
  if (ok && !later.empty()) {
    std::this_thread::sleep_for(50ms);
    ok = send_all(fd, later, until, x);
  }
  if (!ok) {
    ::close(fd);
    return x;
  }
  std::this_thread::sleep_for(pause);
  char buf[65536];
  for (;;) {
    if (Clock::now() >= until) {
      x.timed_out = true;
      break;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r > 0) {
      x.reply.append(buf, static_cast<std::size_t>(r));
      continue;
    }
    if (r < 0 && errno == EAGAIN) continue;
    if (r < 0) x.error = errno;
    break;
  }
  ::close(fd);
  return x;
}

// Whether `reply` is a 200 whose body has exactly its Content-Length.
bool whole_200(const std::string& reply, std::size_t* body_bytes = nullptr, std::size_t* announced = nullptr) {
  const auto head_end = reply.find("\r\n\r\n");
  const auto cl = reply.find("Content-Length: ");
  if (reply.rfind("HTTP/1.0 200 OK\r\n", 0) != 0 || head_end == std::string::npos || cl == std::string::npos) return false;
  const std::size_t want = std::stoul(reply.substr(cl + 16));
  const std::size_t got = reply.size() - head_end - 4;
  if (body_bytes != nullptr) *body_bytes = got;
  if (announced != nullptr) *announced = want;
  return got == want;
}

// Peers that each send a request head one byte a second (never finishing it) and reconnect
// when the server closes them, as slowloris does.
class SlowPeers {
 public:
  SlowPeers(int port, int count) : port_(port), fds_(static_cast<std::size_t>(count), -1) {
    for (int& fd : fds_) fd = connect_nonblocking(port_);
    thread_ = std::thread([this] { run(); });
  }
  ~SlowPeers() {
    stop_.store(true);
    thread_.join();
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  std::uint64_t bytes_sent() const { return bytes_.load(); }

 private:
  void run() {
    static const std::string head = "GET /metrics HTTP/1.0\r\nX-Slow: ";
    std::size_t step = 0;
    while (!stop_.load()) {
      for (int& fd : fds_) {
        const char c = step < head.size() ? head[step] : 'a';
        const ssize_t w = fd < 0 ? -1 : ::send(fd, &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w == 1) {
          bytes_++;
        } else if (fd < 0 || (errno != EAGAIN && errno != EINPROGRESS && errno != ENOTCONN)) {
          if (fd >= 0) ::close(fd);
          fd = connect_nonblocking(port_);  // closed by the server: come back
        }
      }
      ++step;
      for (int i = 0; i < 20 && !stop_.load(); ++i) std::this_thread::sleep_for(50ms);  // a byte a second
    }
  }
  const int port_;
  std::vector<int> fds_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> bytes_{0};
  std::thread thread_;
};

}  // namespace

TEST_CASE("200 slow connections do not keep a scrape waiting", "[integration][metrics][http]") {
  MetricsHttpServer server("127.0.0.1", 0);
  server.publish("stoker_up 1\n");
  const int port = port_of(server);
  SlowPeers slow(port, 200);
  // Let the slow peers take every place and start dribbling their heads.
  const auto warm_until = Clock::now() + 10s;
  while (slow.bytes_sent() < 400 && Clock::now() < warm_until) std::this_thread::sleep_for(50ms);
  REQUIRE(slow.bytes_sent() >= 200);

  // A scrape is served within a few head timeouts, however many slow peers wait (before the
  // fix it waited behind them in the kernel's backlog: tens of seconds). Five, not three: on a
  // loaded 2-core machine (sanitizer builds, parallel ctest) three was missed once by a served
  // scrape; ten seconds still tells the fix from the backlog.
  const auto bound = std::chrono::milliseconds(5 * MetricsHttpServer::kHeadTimeoutMs);
  for (int i = 0; i < 2; ++i) {
    const auto t0 = Clock::now();
    const Exchange x = exchange(port, "GET /metrics HTTP/1.0\r\n\r\n", bound + 20s);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
    INFO("scrape " << i << " took " << took.count() << " ms; bound " << bound.count() << " ms");
    CHECK(whole_200(x.reply));
    CHECK(took < bound);
  }
}

TEST_CASE("a client that sends more after its request still gets the whole response",
          "[integration][metrics][http]") {
  // Big documents (many jobs and readers): one that the socket buffers take whole while the
  // client is not reading yet (the server is done, and a close with unread input resets the
  // connection and destroys what is still queued), and ones that they cannot.
  for (const std::size_t size : {std::size_t{400} << 10, std::size_t{2} << 20, std::size_t{8} << 20}) {
    std::string doc;
    for (int i = 0; doc.size() < size; ++i) {
      doc += "stoker_consumer_releases_total{job=\"job" + std::to_string(i % 97) + "\",rank=\"" +
             std::to_string(i) + "\",reader=\"0\"} " + std::to_string(i * 7) + "\n";
    }
    MetricsHttpServer server("127.0.0.1", 0);
    server.publish(doc);
    const int port = port_of(server);
    // Extra bytes after the head (a pipelined second request, a body, a stray newline), in
    // the request's segment or sent a little later.
    const std::string request = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
    const std::vector<std::string> extras = {"GET /metrics HTTP/1.0\r\n\r\n", std::string(3000, 'x'), "\r\n"};
    for (int i = 0; i < 2 * static_cast<int>(extras.size()); ++i) {
      const std::string& extra = extras[static_cast<std::size_t>(i) / 2];
      const bool later = i % 2 == 1;
      const Exchange x = later ? exchange(port, request, 60s, 300ms, extra) : exchange(port, request + extra, 60s, 300ms);
      std::size_t got = 0, want = 0;
      const bool whole = whole_200(x.reply, &got, &want);
      INFO("document of " << doc.size() << " bytes, extra of " << extra.size() << " bytes"
                          << (later ? " sent 50 ms later" : "") << ": body " << got << " of " << want
                          << ", recv error " << std::strerror(x.error));
      CHECK(whole);
      CHECK(x.error == 0);
      CHECK_FALSE(x.timed_out);
      CHECK(x.reply.size() > doc.size());
    }
  }
}
