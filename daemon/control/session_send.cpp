// Everything said to a client: errors (logged by how much they matter), single messages,
// the Welcome with its descriptor, and JSON replies split into messages. A client's replies
// queue in its outbox while its socket buffer is full and go out in order (EPOLLOUT).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "log/log.hpp"
#include "control/sessions.hpp"

namespace stoker::control {

void Sessions::send_error(Session& s, proto::ErrorCode code, const std::string& text) {
  auto m = proto::make_message<proto::ErrorMsg>(proto::MsgType::kError);
  m.code = static_cast<std::int32_t>(code);
  proto::copy_cstr(m.message, text.c_str());
  if (code == proto::ErrorCode::kJobDrained) {
    stoker::log::info("client pid {}: {}", s.pid, text);
  } else if (code != proto::ErrorCode::kJobFailed) {
    stoker::log::warn("client pid {}: {}", s.pid, text);
  }
  send_all(s, &m, sizeof m);
}

bool Sessions::send_all(Session& s, const void* data, std::size_t n) {
  // Behind queued messages: keep the order.
  if (!s.outbox.empty()) {
    const auto* p = static_cast<const std::uint8_t*>(data);
    s.outbox.emplace_back(p, p + n);
    s.outbox_bytes += n;
    return flush(s);
  }
  // SEQPACKET sends are atomic; a full socket buffer means the client stopped reading,
  // which a well-behaved client never does (one reply per request).
  const ssize_t w = ::send(s.fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (w != static_cast<ssize_t>(n)) s.send_failed = true;
  return !s.send_failed;
}

bool Sessions::send_with_fd(Session& s, const void* data, std::size_t n, int fd) {
  iovec iov{const_cast<void*>(data), n};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  const ssize_t w = ::sendmsg(s.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  return w == static_cast<ssize_t>(n);
}

bool Sessions::send_json(Session& s, const std::string& json, proto::MsgType type) {
  // The JSON in as many messages as it takes, each flagged kStatusMoreFollows but the last;
  // a reader concatenates them (stoker_daemon_status). Queued whole, then flushed.
  constexpr std::size_t kChunk = proto::kMaxMessageBytes - sizeof(proto::MessageHeader);
  std::size_t at = 0;
  do {
    const std::size_t len = std::min(kChunk, json.size() - at);
    std::vector<std::uint8_t> msg(sizeof(proto::MessageHeader) + len);
    auto hdr = proto::make_message<proto::StatusQueryMsg>(type).header;
    hdr.size = static_cast<std::uint32_t>(msg.size());
    hdr.reserved = at + len < json.size() ? proto::kStatusMoreFollows : 0;
    std::memcpy(msg.data(), &hdr, sizeof hdr);
    std::memcpy(msg.data() + sizeof hdr, json.data() + at, len);
    s.outbox_bytes += msg.size();
    s.outbox.push_back(std::move(msg));
    at += len;
  } while (at < json.size());
  return flush(s);
}

bool Sessions::flush(Session& s) {
  // A client that asks and never reads would make the daemon hold its replies forever.
  constexpr std::size_t kMaxBacklog = std::size_t{64} << 20;
  if (s.outbox_bytes > kMaxBacklog) {
    s.send_failed = true;
    return false;
  }
  const bool watching = !s.outbox.empty();
  while (!s.outbox.empty()) {
    const auto& m = s.outbox.front();
    const ssize_t w = ::send(s.fd, m.data(), m.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (w != static_cast<ssize_t>(m.size())) {
      s.send_failed = true;
      return false;
    }
    s.outbox_bytes -= m.size();
    s.outbox.pop_front();
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (s.outbox.empty() ? 0u : static_cast<std::uint32_t>(EPOLLOUT));
  ev.data.u64 = static_cast<std::uint64_t>(s.fd);
  if (watching || !s.outbox.empty()) ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, s.fd, &ev);
  return true;
}

}  // namespace stoker::control
