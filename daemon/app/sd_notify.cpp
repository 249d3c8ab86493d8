#include "app/sd_notify.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace stoker::app {

SdNotify::SdNotify() {
  if (const char* s = std::getenv("NOTIFY_SOCKET"); s != nullptr && *s != '\0') socket_ = s;
  // WATCHDOG_PID, when set, names the process the watchdog is for.
  const char* pid = std::getenv("WATCHDOG_PID");
  const bool for_us = pid == nullptr || std::atol(pid) == static_cast<long>(::getpid());
  if (const char* us = std::getenv("WATCHDOG_USEC"); us != nullptr && for_us) {
    interval_ = std::chrono::microseconds(std::strtoll(us, nullptr, 10));
  }
}

bool SdNotify::send(const std::string& state) const {
  if (socket_.empty()) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_.size() >= sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path, socket_.data(), socket_.size());
  if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';  // abstract namespace
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_.size());
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const ssize_t n = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr), len);
  ::close(fd);
  return n == static_cast<ssize_t>(state.size());
}

void SdNotify::keepalive() {
  if (interval_.count() <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < interval_ / 2) return;
  last_ = now;
  send("WATCHDOG=1");
}

}  // namespace stoker::app
