// The C-level yardstick for `stokerctl consume`'s next() (issue #36): microseconds of one
// 48-byte round trip over a Unix SOCK_SEQPACKET socket pair (what stokerd's protocol uses) to
// an echo thread of this process, with a pause between rounds as a training step would leave.
//
//   stoker_bench_socket_rtt [ROUNDS] [STEP_US]
//
// Prints `c_socket_rtt_us median M p99 P rounds N` (scripts/bench-next.py reads it).
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 1500;
  const int step_us = argc > 2 ? std::atoi(argv[2]) : 2000;
  if (rounds <= 0 || step_us < 0) {
    std::fprintf(stderr, "usage: stoker_bench_socket_rtt [ROUNDS > 0] [STEP_US >= 0]\n");
    return 2;
  }
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    std::perror("socketpair");
    return 1;
  }
  std::thread echo([fd = sv[1]] {
    char buf[64];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
      if (::send(fd, buf, static_cast<std::size_t>(n), 0) != n) return;
    }
  });
  char msg[48] = {}, back[64];
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(rounds));
  for (int i = 0; i < rounds; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (::send(sv[0], msg, sizeof msg, 0) != static_cast<ssize_t>(sizeof msg) || ::recv(sv[0], back, sizeof back, 0) <= 0) {
      std::perror("round trip");
      return 1;
    }
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    if (step_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(step_us));
  }
  ::shutdown(sv[0], SHUT_RDWR);
  echo.join();
  ::close(sv[0]);
  ::close(sv[1]);
  std::sort(us.begin(), us.end());
  std::printf("c_socket_rtt_us median %.1f p99 %.1f rounds %d\n", us[us.size() / 2],
              us[std::min(us.size() - 1, us.size() * 99 / 100)], rounds);
  return 0;
}
