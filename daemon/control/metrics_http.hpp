// The Prometheus endpoint: `GET /metrics` (text exposition 0.0.4) over HTTP/1.0, on Boost.Asio
// with Boost.Beast's request parser (metrics_http_request.hpp). It serves one read-only
// document that the control loop renders once a second and publishes here; one thread of its
// own runs an io_context, answers each connection from that document, and never touches the
// daemon's state. No keep-alive, files, TLS or thread pool: accept, read one request head,
// write one buffer, close.
//
// Bounds (a port on the loopback is still reachable by every local user, and one of them may
// hold connections open on purpose, a byte a second):
//  - at most kMaxClients connections at once. The kernel's backlog is emptied as connections
//    arrive: when all are taken, the oldest one still sending its request head (then the
//    oldest one lingering after its response) is closed to make room. A scraper sends its
//    whole request at once, so it mostly leaves that state at the read right after accept,
//    and is closed only if kMaxClients newer connections arrive before its request does;
//    slow senders can neither keep it in the backlog nor hold its place. While every place
//    is taken by a connection being answered, nothing is accepted;
//  - a request head of at most kMaxRequestBytes (Beast's header_limit), or 431 and close;
//  - kHeadTimeoutMs from accept to the end of the request head, kDeadlineMs from accept to
//    the last byte of the response handed to the kernel, or the connection is dropped;
//  - after the response: shutdown(SHUT_WR), then whatever the peer still sends is read and
//    discarded until it closes, at most kLingerMs. Closing a socket with unread input makes the
//    kernel send a reset that destroys the response still in flight to the peer;
//  - non-blocking sockets and one event loop: a slow or silent peer never blocks another.
// Anything that is not `GET /metrics` (or HEAD) gets a short 4xx and a close.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "base/mutex.hpp"
#include "base/thread_annotations.hpp"

namespace stoker::control {

class MetricsHttpServer {
 public:
  static constexpr std::size_t kMaxClients = 16;
  static constexpr std::size_t kMaxRequestBytes = 4096;  // = kMetricsMaxRequestBytes
  static constexpr int kHeadTimeoutMs = 2000;
  static constexpr int kDeadlineMs = 5000;
  static constexpr int kLingerMs = 1000;

  // Binds host:port (numeric; port 0 picks a free one) and starts the thread. Throws
  // std::runtime_error naming the address when it cannot listen.
  MetricsHttpServer(const std::string& host, std::uint16_t port);
  ~MetricsHttpServer();  // stops and joins the thread, closes every connection
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The document served from now on (thread-safe; connections being answered keep the one
  // they started with).
  void publish(std::string text) STOKER_EXCLUDES(mu_);
  // "127.0.0.1:9400" / "[::1]:9400" with the port actually bound.
  const std::string& address() const { return address_; }
  // Requests answered (any status), for tests and logs.
  std::uint64_t requests() const { return requests_.load(); }

 private:
  class Loop;        // the io_context, the acceptor and the connections (metrics_http.cpp)
  class Connection;  // one peer, from accept to close

  std::shared_ptr<const std::string> current() const STOKER_EXCLUDES(mu_);

  std::string address_;
  mutable base::Mutex mu_;
  std::shared_ptr<const std::string> document_ STOKER_GUARDED_BY(mu_);
  std::atomic<std::uint64_t> requests_{0};
  // Touched by the server's thread only once it runs (the constructor sets it up before).
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace stoker::control
