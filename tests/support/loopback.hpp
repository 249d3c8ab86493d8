// Loopback TCP for tests: a socket on a free port, and a connection to one.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>

#include <catch2/catch.hpp>

namespace stoker::test {

// A TCP socket bound to a free loopback port (written to `port`), not yet listening.
inline int loopback_socket(std::uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof at;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&at), &len) == 0);
  port = ntohs(at.sin_port);
  return fd;
}

// A TCP connection to a loopback port.
inline int connect_loopback(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(port);
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
  return fd;
}

// A connected loopback TCP pair, {reader, writer}, closed when it goes (a side set to -1 is not).
// rcvbuf > 0: the reader's receive buffer, set before the handshake so the window scale allows
// it; recv_timeout_ms > 0: the reader's SO_RCVTIMEO.
struct LoopbackPair {
  int reader = -1, writer = -1;
  explicit LoopbackPair(int recv_timeout_ms = 0, int rcvbuf = 0) {
    std::uint16_t port = 0;
    const int listener = loopback_socket(port);
    if (rcvbuf > 0)
      ::setsockopt(listener, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);  // the accepted socket inherits it
    REQUIRE(::listen(listener, 1) == 0);
    writer = connect_loopback(port);
    reader = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    REQUIRE(reader >= 0);
    ::close(listener);
    if (recv_timeout_ms > 0) {
      const timeval wait{recv_timeout_ms / 1000, (recv_timeout_ms % 1000) * 1000};
      ::setsockopt(reader, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
    }
  }
  LoopbackPair(const LoopbackPair&) = delete;
  LoopbackPair& operator=(const LoopbackPair&) = delete;
  ~LoopbackPair() {
    if (reader >= 0) ::close(reader);
    if (writer >= 0) ::close(writer);
  }
};

}  // namespace stoker::test
