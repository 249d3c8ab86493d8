// Unit tier: whether a TCP peer is reading (daemon/remote/send_limits.hpp), on a real loopback
// connection. remote.compression auto compresses while a worker's writes wait on the link, but
// not when the node is what does not read: then the window it advertises is closed. A paced
// writer to a reader that keeps up never sees it closed; a writer to a reader that stopped does.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <chrono>
#include <thread>
#include <vector>

#include "loopback.hpp"
#include "remote/send_limits.hpp"

TEST_CASE("send limits: a stopped reader closes its window, one that keeps up does not", "[remote]") {
  // A receive buffer that holds several frames from the start: a reader that keeps up never
  // closes the window; the reader's thread looks at its flags every 5 ms.
  stoker::test::LoopbackPair p(5, 8 << 20);
  std::atomic<bool> reading{true}, done{false};
  std::thread reader([&] {
    std::vector<char> into(1 << 20);
    while (!done.load()) {
      if (!reading.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      ::recv(p.reader, into.data(), into.size(), 0);  // waits at most 5 ms
    }
  });
  std::vector<char> frame(750'000, 'x');  // five 224x224 samples
  for (int i = 0; i < 10; ++i) {          // paced, as a worker behind a slow link sends, and read promptly
    REQUIRE(::send(p.writer, frame.data(), frame.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(frame.size()));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK_FALSE(stoker::remote::peer_window_closed(p.writer));
  }

  reading = false;  // the node stops reading: the sends fill its buffer, and its window closes
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(::fcntl(p.writer, F_SETFL, O_NONBLOCK) == 0);
  std::uint64_t sent = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!stoker::remote::peer_window_closed(p.writer) && std::chrono::steady_clock::now() < until) {
    const ssize_t w = ::send(p.writer, frame.data(), frame.size(), MSG_NOSIGNAL);
    if (w > 0) sent += static_cast<std::uint64_t>(w);
    if (w <= 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  INFO("sent " << sent << " bytes after the reader stopped");
  CHECK(stoker::remote::peer_window_closed(p.writer));
  CHECK(sent > 0);

  reading = true;  // it reads again: the window opens
  bool opened = false;
  for (int i = 0; i < 500 && !opened; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    opened = !stoker::remote::peer_window_closed(p.writer);
  }
  CHECK(opened);
  done = true;
  reader.join();

  // Not a TCP socket: nothing is said.
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  CHECK_FALSE(stoker::remote::peer_window_closed(fds[0]));
  ::close(fds[0]);
  ::close(fds[1]);
}
