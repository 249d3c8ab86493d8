#include "remote/results_channel.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "remote/protocol.hpp"
#include "remote/worker_stream.hpp"

namespace stoker::remote {

namespace {

std::string errno_text(int e) { return std::strerror(e); }

bool send_exact(int fd, const void* from, std::size_t n) {
  const auto* p = static_cast<const char*>(from);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

void set_timeout(int fd, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

}  // namespace

int recv_exact(int fd, void* to, std::size_t n, std::size_t& got, bool wait_again) {
  auto* p = static_cast<char*>(to);
  got = 0;
  while (got < n) {
    const ssize_t r = ::recv(fd, p + got, n - got, MSG_WAITALL);
    if (r > 0) {
      got += static_cast<std::size_t>(r);
    } else if (r == 0) {
      return -1;
    } else if (errno != EINTR && !(wait_again && (errno == EAGAIN || errno == EWOULDBLOCK))) {
      return errno;
    }
  }
  return 0;
}

// ---- the node's side ------------------------------------------------------------------------

std::string make_results_nonce() {
  std::string n(kNonceBytes, '\0');
  std::size_t got = 0;
  while (got < n.size()) {
    const ssize_t r = ::getrandom(n.data() + got, n.size() - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw std::runtime_error("getrandom: " + errno_text(errno));
    got += static_cast<std::size_t>(r);
  }
  return n;
}

int connect_results(const std::string& host, std::uint32_t port, const std::string& nonce, std::string& why) {
  if (port == 0 || port > 65535 || nonce.size() != kNonceBytes) {
    why = "the worker offered port " + std::to_string(port);
    return -1;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (const int e = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); e != 0 || res == nullptr) {
    why = "cannot resolve " + host + ": " + gai_strerror(e);
    return -1;
  }
  const auto until = std::chrono::steady_clock::now() + kBindTimeout;
  int fd = -1;
  for (addrinfo* p = res; p != nullptr && fd < 0; p = p->ai_next) {
    fd = ::socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, p->ai_protocol);
    if (fd < 0) {
      why = "socket: " + errno_text(errno);
      continue;
    }
    int e = ::connect(fd, p->ai_addr, p->ai_addrlen) == 0 ? 0 : errno;
    if (e == EINPROGRESS) {
      pollfd pf{fd, POLLOUT, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      const int r = ::poll(&pf, 1, static_cast<int>(std::max<std::int64_t>(0, left.count())));
      socklen_t len = sizeof e;
      if (r <= 0) {
        e = r == 0 ? ETIMEDOUT : errno;
      } else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0) {
        e = errno;
      }
    }
    if (e != 0) {
      why = "connect to " + host + ":" + service + ": " + errno_text(e);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0) return -1;
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
  set_timeout(fd, std::max(std::chrono::milliseconds(1), left));
  std::string hello(kResultsMagic, sizeof kResultsMagic);
  hello += nonce;
  char ack = 0;
  std::size_t got = 0;
  if (!send_exact(fd, hello.data(), hello.size())) {
    why = "sending the nonce: " + errno_text(errno);
  } else if (const int e = recv_exact(fd, &ack, 1, got); e != 0) {
    why = e < 0 ? std::string("the worker closed it without binding it") : "waiting to be bound: " + errno_text(e);
  } else if (ack != kResultsBound) {
    why = "the worker answered the nonce with byte " + std::to_string(static_cast<unsigned char>(ack));
  } else {
    set_timeout(fd, std::chrono::milliseconds(0));  // bound: the reader blocks until shut down
    // An items frame's send waits at most this long at a time: between waits the sender checks
    // that its link lives and its deadline has not passed (write_items_frame).
    const timeval send_wait{0, 200 * 1000};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_wait, sizeof send_wait);
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // an ItemBatch leaves at once
    return fd;
  }
  ::close(fd);
  return -1;
}

namespace {

// Fills a frame's 4 bytes of room with its body's length (or `lie`'s). false: no room, or too long.
bool put_length(std::string& frame, bool lie) {
  if (frame.size() < 4 || frame.size() - 4 > 0xffffffffu) return false;
  const std::uint64_t body = lie ? 0x7fffffffu : frame.size() - 4;
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((body >> (8 * i)) & 0xff);
  return true;
}

}  // namespace

bool write_results_frame(int fd, std::string& frame, bool lie) {
  return put_length(frame, lie) && send_exact(fd, frame.data(), frame.size());
}

bool write_items_frame(int fd, std::string& frame, const std::function<bool()>& go_on) {
  if (!put_length(frame, false)) return false;
  const char* p = frame.data();
  std::size_t n = frame.size();
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= static_cast<std::size_t>(w);
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!go_on()) return false;  // the send timeout passed: is the link still wanted?
    } else {
      return false;
    }
  }
  return true;
}

FrameRead read_results_frame(int fd, std::vector<std::uint8_t>& body, std::size_t max, std::string& why,
                             const char* what) {
  std::uint8_t len[4];
  std::size_t got = 0;
  if (const int e = recv_exact(fd, len, sizeof len, got); e != 0) {
    if (e < 0 && got == 0) {
      why = "closed";
      return FrameRead::kClosed;
    }
    why = e < 0 ? "closed inside a frame's length" : "reading: " + errno_text(e);
    return FrameRead::kCut;
  }
  const std::uint64_t n =
      std::uint64_t{len[0]} | std::uint64_t{len[1]} << 8 | std::uint64_t{len[2]} << 16 | std::uint64_t{len[3]} << 24;
  if (n == 0 || n > max) {
    why = std::string(what) + " frame of " + std::to_string(n) + " bytes (1 to " + std::to_string(max) + ")";
    return FrameRead::kTooLong;
  }
  body.resize(n);  // keeps its capacity between frames: its pages stay mapped
  if (const int e = recv_exact(fd, body.data(), n, got); e != 0) {
    why = e < 0 ? "closed after " + std::to_string(got) + " of a frame's " + std::to_string(n) + " bytes"
                : "reading: " + errno_text(e);
    return FrameRead::kCut;
  }
  return FrameRead::kFrame;
}

}  // namespace stoker::remote
