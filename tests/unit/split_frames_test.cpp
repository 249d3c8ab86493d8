// Unit tier: protocol 1.5's split results frames on a real loopback TCP connection
// (daemon/remote/split_frames.hpp, issue #36). The node's receive_parts waits for all of a
// frame's missing pixels before taking any (the socket's low-water mark), so a frame arriving in
// pieces wakes the reader once, not once a piece; a frame that stops halfway comes back as
// EAGAIN after the wait and is finished when the rest comes; the mark is always put back, so the
// next frame's lengths are not held back by it; and a worker's frame lies only as told.
#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "loopback.hpp"
#include "remote/split_frames.hpp"

namespace remote = stoker::remote;
using remote::FrameRead;

namespace {

// A connected loopback TCP pair: {reader, writer}, the reader with the node's 250 ms receive
// timeout (the split reader's).
struct TcpPair : stoker::test::LoopbackPair {
  TcpPair() : LoopbackPair(stoker::remote::kStallCheckMs) {}
};

void send_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    REQUIRE(w > 0);
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

// A split frame's bytes: lengths, an (opaque here) message, the pixels.
std::string frame_bytes(const std::string& message, const std::string& pixels) {
  std::string f(8, '\0');
  for (int i = 0; i < 4; ++i) {
    f[i] = static_cast<char>((message.size() >> (8 * i)) & 0xff);
    f[4 + i] = static_cast<char>((pixels.size() >> (8 * i)) & 0xff);
  }
  return f + message + pixels;
}

std::string pattern(std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed * 7) >> 3);
  return s;
}

long voluntary_switches() {
  rusage u{};
  ::getrusage(RUSAGE_THREAD, &u);
  return u.ru_nvcsw;
}

// receive_parts until it is done or fails (20 waits at most): its last answer; `waits` counts
// the waits that came back unfinished (EAGAIN).
int receive_all(int fd, std::vector<iovec>& parts, int& waits) {
  std::size_t next = 0;
  int e = EAGAIN;
  waits = 0;
  while (e == EAGAIN && waits < 20) {
    e = remote::receive_parts(fd, parts, next);
    waits += e == EAGAIN;
  }
  return e;
}

// A frame's lengths and message, which must read: the message; `total`, its pixels' count.
std::string read_head(int fd, std::size_t& total) {
  std::vector<std::uint8_t> head;
  std::string why;
  REQUIRE(remote::read_split_head(fd, head, 1 << 30, total, why) == FrameRead::kFrame);
  return std::string(head.begin(), head.end());
}

int low_water_mark(int fd) {
  int mark = 0;
  socklen_t len = sizeof mark;
  ::getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &mark, &len);
  return mark;
}

}  // namespace

TEST_CASE("a split frame's pixels arriving in pieces wake the reader once, and come whole", "[unit][remote]") {
  TcpPair pair;
  const std::string message = "message", pixels = pattern(6 * 65536, 1);
  const std::string bytes = frame_bytes(message, pixels);
  constexpr int kPieces = 6;
  std::thread writer([&] {
    const std::size_t head = 8 + message.size(), piece = pixels.size() / kPieces;
    send_all(pair.writer, bytes.data(), head + piece);
    for (int i = 1; i < kPieces; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
      const std::size_t from = head + static_cast<std::size_t>(i) * piece;
      send_all(pair.writer, bytes.data() + from, i + 1 == kPieces ? bytes.size() - from : piece);
    }
  });
  std::size_t total = 0;
  REQUIRE(read_head(pair.reader, total) == message);
  REQUIRE(total == pixels.size());
  // Two parts, as two results' slots would be.
  std::string got(total, '\0');
  std::vector<iovec> parts{{got.data(), total / 3}, {got.data() + total / 3, total - total / 3}};
  const long before = voluntary_switches();
  int waits = 0;
  const int e = receive_all(pair.reader, parts, waits);
  const long switches = voluntary_switches() - before;
  writer.join();
  REQUIRE(e == 0);
  CHECK(waits == 0);  // the pieces came within one wait: nothing stalled on the mark
  CHECK(got == pixels);
  // One sleep for the whole frame (a mark of 1 wakes the reader at every piece: 5 or more).
  CHECK(switches <= 2);
  CHECK(low_water_mark(pair.reader) == 1);
}

TEST_CASE("a split frame that stops halfway comes back after the wait and is finished when the rest comes",
          "[unit][remote]") {
  TcpPair pair;
  const std::string message = "m", pixels = pattern(300000, 2), next_message = "next", next_pixels = pattern(100, 3);
  const std::string bytes = frame_bytes(message, pixels) + frame_bytes(next_message, next_pixels);
  const std::size_t first = 8 + message.size() + pixels.size() / 2;
  std::thread writer([&] {
    send_all(pair.writer, bytes.data(), first);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));  // past two 250 ms waits
    send_all(pair.writer, bytes.data() + first, bytes.size() - first);
  });
  std::size_t total = 0;
  read_head(pair.reader, total);
  std::string got(total, '\0');
  std::vector<iovec> parts{{got.data(), total}};
  int waits = 0;
  REQUIRE(receive_all(pair.reader, parts, waits) == 0);
  CHECK(waits >= 1);  // the stall was seen (the dispatcher's chance to hedge)
  CHECK(got == pixels);
  // The mark is back at 1: the next frame, whose pixels are fewer than the first's, is read
  // without waiting for bytes that never come.
  CHECK(low_water_mark(pair.reader) == 1);
  CHECK(read_head(pair.reader, total) == next_message);
  std::string tail(total, '\0');
  parts = {{tail.data(), total}};
  CHECK(receive_all(pair.reader, parts, waits) == 0);
  CHECK(waits == 0);
  CHECK(tail == next_pixels);
  writer.join();
}

TEST_CASE("a frame closed inside its pixels is -1, not a wait forever", "[unit][remote]") {
  TcpPair pair;
  const std::string bytes = frame_bytes("m", pattern(200000, 4));
  send_all(pair.writer, bytes.data(), bytes.size() / 2);
  ::close(pair.writer);
  pair.writer = -1;
  std::size_t total = 0;
  read_head(pair.reader, total);
  std::string got(total, '\0');
  std::vector<iovec> parts{{got.data(), total}};
  int waits = 0;
  CHECK(receive_all(pair.reader, parts, waits) == -1);
  CHECK(waits == 0);  // a closed connection wakes the wait at once
}

TEST_CASE("a worker's split frame lies only as told: its pixel total long, or one byte short", "[unit][remote]") {
  for (const remote::FrameLie lie :
       {remote::FrameLie::kNone, remote::FrameLie::kLength, remote::FrameLie::kPixelCount}) {
    TcpPair pair;
    std::string head(remote::kSplitPrefixBytes, '\0');
    head += "msg";
    const std::vector<std::string> pixels{pattern(1000, 5), pattern(24, 6)};
    REQUIRE(remote::write_split_frame(pair.writer, head, pixels, lie));
    std::vector<std::uint8_t> got;
    std::size_t total = 0;
    std::string why;
    const FrameRead read = remote::read_split_head(pair.reader, got, 1 << 20, total, why);
    if (lie == remote::FrameLie::kLength) {
      CHECK(read == FrameRead::kTooLong);
      CHECK_THAT(why, Catch::Contains("2147483647 bytes of pixels"));
      continue;
    }
    REQUIRE(read == FrameRead::kFrame);
    CHECK(std::string(got.begin(), got.end()) == "msg");
    CHECK(total == (lie == remote::FrameLie::kPixelCount ? 1023u : 1024u));
  }
}
