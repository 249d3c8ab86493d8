#include "remote/split_frames.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

namespace stoker::remote {

namespace {

// The most receive_parts waits for at once (the low-water mark's cap); kStallCheckMs bounds how long.
constexpr std::size_t kMaxLowWaterMark = std::size_t{1} << 20;

void put_u32(char* at, std::uint64_t v) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

std::uint64_t get_u32(const std::uint8_t* at) {
  return std::uint64_t{at[0]} | std::uint64_t{at[1]} << 8 | std::uint64_t{at[2]} << 16 | std::uint64_t{at[3]} << 24;
}

// Drops `n` sent or received bytes from the front of parts[next..]; moves `next` past full ones.
void advance(std::vector<iovec>& parts, std::size_t& next, std::size_t n) {
  while (next < parts.size() && n >= parts[next].iov_len) {
    n -= parts[next].iov_len;
    parts[next].iov_len = 0;
    ++next;
  }
  if (next < parts.size()) {
    parts[next].iov_base = static_cast<char*>(parts[next].iov_base) + n;
    parts[next].iov_len -= n;
  }
  while (next < parts.size() && parts[next].iov_len == 0) ++next;  // empty parts (no pixels)
}

}  // namespace

bool write_split_frame(int fd, std::string& head, std::span<const std::string> pixels, FrameLie lie,
                       std::chrono::milliseconds pause) {
  if (head.size() < kSplitPrefixBytes || head.size() - kSplitPrefixBytes > kMaxSplitHeadBytes) return false;
  std::uint64_t total = 0;
  for (const std::string& p : pixels) total += p.size();
  if (total > 0x7fffffffu) return false;
  put_u32(head.data(), head.size() - kSplitPrefixBytes);
  put_u32(head.data() + 4, lie == FrameLie::kLength                    ? 0x7fffffffu
                           : lie == FrameLie::kPixelCount && total > 0 ? total - 1
                                                                       : total);
  std::vector<iovec> parts;
  parts.reserve(pixels.size() + 1);
  parts.push_back({head.data(), head.size()});
  for (const std::string& p : pixels) {
    if (!p.empty()) parts.push_back({const_cast<char*>(p.data()), p.size()});
  }
  std::size_t next = 0;
  // With a pause, the first send stops at the head and half the pixels (tests only).
  std::size_t before_pause = pause.count() > 0 ? head.size() + total / 2 : SIZE_MAX;
  while (next < parts.size()) {
    msghdr m{};
    m.msg_iov = parts.data() + next;
    m.msg_iovlen = std::min<std::size_t>(parts.size() - next, IOV_MAX);
    std::vector<iovec> cut;
    if (before_pause != SIZE_MAX) {
      std::size_t room = before_pause;
      for (std::size_t i = 0; i < m.msg_iovlen && room > 0; ++i) {
        cut.push_back(m.msg_iov[i]);
        cut.back().iov_len = std::min(cut.back().iov_len, room);
        room -= cut.back().iov_len;
      }
      m.msg_iov = cut.data();
      m.msg_iovlen = cut.size();
    }
    const ssize_t w = ::sendmsg(fd, &m, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    advance(parts, next, static_cast<std::size_t>(w));
    if (before_pause != SIZE_MAX && (before_pause -= static_cast<std::size_t>(w)) == 0) {
      std::this_thread::sleep_for(pause);
      before_pause = SIZE_MAX;
    }
  }
  return true;
}

FrameRead read_split_head(int fd, std::vector<std::uint8_t>& head, std::size_t max_pixels, std::size_t& pixels,
                          std::string& why) {
  std::uint8_t prefix[kSplitPrefixBytes];
  std::size_t got = 0;
  if (const int e = recv_exact(fd, prefix, sizeof prefix, got, true); e != 0) {
    if (e < 0 && got == 0) {
      why = "closed";
      return FrameRead::kClosed;
    }
    why = e < 0 ? "closed inside a frame's lengths" : "reading: " + std::string(std::strerror(e));
    return FrameRead::kCut;
  }
  const std::uint64_t n = get_u32(prefix), total = get_u32(prefix + 4);
  if (n == 0 || n > kMaxSplitHeadBytes) {
    why = "a results frame whose message is " + std::to_string(n) + " bytes (1 to " +
          std::to_string(kMaxSplitHeadBytes) + ")";
    return FrameRead::kTooLong;
  }
  if (total > max_pixels) {
    why =
        "a results frame of " + std::to_string(total) + " bytes of pixels (at most " + std::to_string(max_pixels) + ")";
    return FrameRead::kTooLong;
  }
  head.resize(n);  // keeps its capacity between frames
  if (const int e = recv_exact(fd, head.data(), n, got, true); e != 0) {
    why = e < 0 ? "closed after " + std::to_string(got) + " of a frame's " + std::to_string(n) + " bytes of message"
                : "reading: " + std::string(std::strerror(e));
    return FrameRead::kCut;
  }
  pixels = static_cast<std::size_t>(total);
  return FrameRead::kFrame;
}

int receive_parts(int fd, std::vector<iovec>& parts, std::size_t& next) {
  while (next < parts.size() && parts[next].iov_len == 0) ++next;
  if (next == parts.size()) return 0;
  // Wait for all the pixels still missing before taking any: with the receive low-water mark at
  // their count, the kernel wakes this reader once, not at each ~64 KiB segment (loopback) as a
  // frame arrives (issue #36: the reader woke ~1.5 times a frame; each wake-up costs the node a
  // context switch). Nothing is read meanwhile, so the unread bytes only grow and reach the mark;
  // a closed receive window wakes it too (tcp_epollin_ready), and the kernel caps the mark at
  // half its largest receive buffer. The mark goes back to 1 before the recvmsg below and
  // before the next frame's lengths are waited for.
  std::size_t missing = 0;
  for (std::size_t i = next; i < parts.size(); ++i) missing += parts[i].iov_len;
  if (int mark = static_cast<int>(std::min<std::size_t>(missing, kMaxLowWaterMark)); mark > 1) {
    ::setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &mark, sizeof mark);
    pollfd ready{fd, POLLIN, 0};
    int waited = -1;
    while ((waited = ::poll(&ready, 1, kStallCheckMs)) < 0 && errno == EINTR) {
    }
    mark = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &mark, sizeof mark);
    if (waited == 0) return EAGAIN;
  }
  while (next < parts.size()) {
    msghdr m{};
    m.msg_iov = parts.data() + next;
    m.msg_iovlen = std::min<std::size_t>(parts.size() - next, IOV_MAX);
    const ssize_t r = ::recvmsg(fd, &m, MSG_WAITALL);
    if (r > 0) {
      advance(parts, next, static_cast<std::size_t>(r));
    } else if (r == 0) {
      return -1;
    } else if (errno == EWOULDBLOCK) {
      return EAGAIN;
    } else if (errno != EINTR) {
      return errno;
    }
  }
  return 0;
}

}  // namespace stoker::remote
