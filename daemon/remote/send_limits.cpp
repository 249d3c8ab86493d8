#include "remote/send_limits.hpp"

#include <linux/tcp.h>  // tcp_info with tcpi_snd_wnd (glibc's lacks it)
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstring>

namespace stoker::remote {

bool peer_window_closed(int fd) {
  tcp_info t;
  std::memset(&t, 0, sizeof t);
  socklen_t n = sizeof t;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &t, &n) != 0) return false;
  // An older kernel fills less of the struct: then it does not say.
  if (n < offsetof(tcp_info, tcpi_snd_wnd) + sizeof t.tcpi_snd_wnd) return false;
  return t.tcpi_snd_wnd < kClosedWindowBytes;
}

}  // namespace stoker::remote
