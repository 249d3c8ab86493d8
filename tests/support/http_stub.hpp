// A loopback HTTP/1.1 server for tests, one connection at a time on one thread (or each on its own,
// `concurrent`): each request's
// head (request line and headers, as received) goes to `answer`, which returns the raw bytes
// to send back, or "" to reset the connection without an answer (SO_LINGER 0: an RST). What
// An answer starting with "RST:" sends what follows, then resets (a connection cut mid-body). What
// it answered is kept so tests can look at the requests. Keep-alive is honoured, so a client
// reusing its connection is served on it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace stoker::test {

class HttpStub {
 public:
  using Answer = std::function<std::string(const std::string& head)>;

  // `concurrent`: each connection on its own thread (as real stores serve), for tests where a
  // client holds many connections at once; `answer` is then called from several threads.
  explicit HttpStub(Answer answer, bool concurrent = false) : answer_(std::move(answer)), concurrent_(concurrent) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      throw std::runtime_error("HttpStub: cannot listen on loopback");
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~HttpStub() {
    stop_ = true;
    thread_.join();
    for (std::thread& t : connection_threads_) t.join();
    ::close(fd_);
  }
  HttpStub(const HttpStub&) = delete;
  HttpStub& operator=(const HttpStub&) = delete;

  int port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<std::string> heads() const {
    std::lock_guard lock(mu_);
    return heads_;
  }
  // Connections accepted: with keep-alive, fewer than requests.
  int connections() const { return connections_.load(); }

 private:
  bool readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 50) > 0;
  }
  void serve() {
    while (!stop_) {
      if (!readable(fd_)) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      ++connections_;
      if (concurrent_) {
        connection_threads_.emplace_back([this, c] { serve_connection(c); });  // joined by the destructor
      } else {
        serve_connection(c);
      }
    }
  }

  void serve_connection(int c) {
    {
      std::string buf;
      bool open = true;
      while (open && !stop_) {
        const auto end = buf.find("\r\n\r\n");
        if (end == std::string::npos) {
          if (!readable(c)) continue;
          char chunk[4096];
          const ssize_t n = ::read(c, chunk, sizeof chunk);
          if (n <= 0) break;
          buf.append(chunk, static_cast<std::size_t>(n));
          continue;
        }
        const std::string head = buf.substr(0, end + 4);
        buf.erase(0, end + 4);
        {
          std::lock_guard lock(mu_);
          heads_.push_back(head);
        }
        std::string out = answer_(head);
        bool reset_after = false;
        if (out.rfind("RST:", 0) == 0) {
          out.erase(0, 4);
          reset_after = true;
        }
        if (out.empty()) {
          linger l{1, 0};
          ::setsockopt(c, SOL_SOCKET, SO_LINGER, &l, sizeof l);
          open = false;
          break;
        }
        for (std::size_t at = 0; at < out.size();) {
          const ssize_t n = ::write(c, out.data() + at, out.size() - at);
          if (n <= 0) {
            open = false;
            break;
          }
          at += static_cast<std::size_t>(n);
        }
        if (reset_after) {
          linger l{1, 0};
          ::setsockopt(c, SOL_SOCKET, SO_LINGER, &l, sizeof l);
          open = false;
        }
        if (out.find("Connection: close") != std::string::npos) open = false;
      }
      ::close(c);
    }
  }

  Answer answer_;
  const bool concurrent_ = false;
  std::vector<std::thread> connection_threads_;  // the accepting thread's (concurrent_)
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  mutable std::mutex mu_;
  std::vector<std::string> heads_;
  std::thread thread_;
};

// An HTTP response with a body and Content-Length.
inline std::string http_response(int code, const std::string& reason, const std::string& body,
                                 const std::string& extra_headers = "") {
  return "HTTP/1.1 " + std::to_string(code) + " " + reason + "\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n" + extra_headers + "\r\n" + body;
}

}  // namespace stoker::test
