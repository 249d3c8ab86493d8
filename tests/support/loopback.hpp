// Loopback TCP for tests: a socket on a free port, and a connection to one.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
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

}  // namespace stoker::test
