// A tiny HTTP/1.0 responder for `GET /metrics` (Prometheus text exposition 0.0.4).
//
// Why hand-written rather than civetweb: it serves one read-only document that the control
// loop renders once a second, so all it needs is accept, read one request head, write one
// buffer, close. Written out it is ~300 lines whose every bound is visible here, on its own
// thread, with no second copy of the daemon's state and no library features (CGI, files,
// TLS, keep-alive, its own thread pool) that would have to be switched off and audited.
//
// Bounds (a port on the loopback is still reachable by every local user, and one of them may
// hold connections open on purpose, a byte a second):
//  - at most kMaxClients connections at once. The kernel's backlog is emptied as connections
//    arrive: when all are taken, the oldest one still sending its request head (then the
//    oldest one lingering after its response) is closed to make room. A scraper sends its
//    whole request at once, so it mostly leaves that state at the read right after accept,
//    and is closed only if kMaxClients newer connections arrive before its request does;
//    slow senders can neither keep it in the backlog nor hold its place;
//  - a request head of at most kMaxRequestBytes, or 431 and close;
//  - kHeadTimeoutMs from accept to the end of the request head, kDeadlineMs from accept to
//    the last byte of the response handed to the kernel, or the connection is dropped;
//  - after the response: shutdown(SHUT_WR), then whatever the peer still sends is read and
//    discarded until it closes, at most kLingerMs. Closing a socket with unread input makes the
//    kernel send a reset that destroys the response still in flight to the peer;
//  - non-blocking sockets and one poll(): a slow or silent peer never blocks another.
// Anything that is not `GET /metrics` (or HEAD) gets a short 4xx and a close; nothing a peer
// sends can reach the daemon's state, which this thread never touches.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace stoker::control {

class MetricsHttpServer {
 public:
  static constexpr std::size_t kMaxClients = 16;
  static constexpr std::size_t kMaxRequestBytes = 4096;
  static constexpr int kHeadTimeoutMs = 2000;
  static constexpr int kDeadlineMs = 5000;
  static constexpr int kLingerMs = 1000;

  // Binds host:port (numeric; port 0 picks a free one) and starts the thread. Throws
  // std::runtime_error naming the address when it cannot listen.
  MetricsHttpServer(const std::string& host, std::uint16_t port);
  ~MetricsHttpServer();  // stops and joins the thread, closes every connection
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The document served from now on (thread-safe).
  void publish(std::string text);
  // "127.0.0.1:9400" / "[::1]:9400" with the port actually bound.
  const std::string& address() const { return address_; }
  // Requests answered (any status), for tests and logs.
  std::uint64_t requests() const { return requests_.load(); }

 private:
  void run();
  std::shared_ptr<const std::string> current() const;

  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: stop
  std::string address_;
  mutable std::mutex mu_;
  std::shared_ptr<const std::string> document_;  // guarded by mu_
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> requests_{0};
  std::thread thread_;
};

}  // namespace stoker::control
