// Benchmark (not a test): the least CPU a receiver can spend per remote sample over TCP on this
// machine — the yardstick of bench-remote.py's `node cpu per remote sample / local` (issue #36).
//
// A sender process (the "worker", pinned to one core) writes messages of `per` samples of
// `bytes` each, paced at `rate` samples a second, behind an 8-byte header; the receiver (the
// "node", pinned to another core) reads them with no framework at all, in two ways:
//   direct  each sample received straight into its slot of a shared-memory ring (one copy,
//           the kernel's);
//   copy    the message received into a buffer, then each sample copied into its slot (two
//           copies, as through gRPC's receive slices); with a `copy chunk`, the message passes
//           through a buffer of that many bytes, a chunk at a time (a small buffer stays in
//           cache between the kernel's copy and this one).
// Prints, per way, the receiver's user and system CPU per sample and its context switches per
// sample (getrusage over the whole run). No framing, flow control, checks or hand-off is
// measured: a transport can only add to these figures.
//
//   build/bin/stoker_bench_tcp_floor [bytes=150528] [per=5] [rate=1000] [samples=10000]
//                                    [receiver core=0] [sender core=1] [copy chunk=the message]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

struct Args {
  std::size_t bytes = 150528;  // a 3x224x224 uint8 sample
  std::uint32_t per = 5;       // samples a message (what bench-remote's worker linger gives)
  double rate = 1000;          // samples a second (a 1-thread worker's)
  std::uint32_t samples = 10000;
  int receiver_core = 0, sender_core = 1;
  std::size_t chunk = 0;  // the copy way's buffer; 0: the whole message
};

void pin(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  sched_setaffinity(0, sizeof set, &set);  // best effort: an absent core leaves it unpinned
}

bool recv_all(int fd, void* p, std::size_t n) {
  auto* b = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = recv(fd, b, n, MSG_WAITALL);
    if (r <= 0) return false;
    b += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool send_all(int fd, iovec* v, int count) {
  while (count > 0) {
    const ssize_t w = writev(fd, v, count);
    if (w <= 0) return false;
    auto left = static_cast<std::size_t>(w);
    while (count > 0 && left >= v->iov_len) {
      left -= v->iov_len;
      ++v;
      --count;
    }
    if (count > 0) {
      v->iov_base = static_cast<char*>(v->iov_base) + left;
      v->iov_len -= left;
    }
  }
  return true;
}

[[noreturn]] void sender(const Args& a, const sockaddr_in& to) {
  pin(a.sender_core);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) _exit(2);
  std::vector<char> pixels(a.bytes * a.per);
  for (std::size_t k = 0; k < pixels.size(); ++k) pixels[k] = static_cast<char>(k * 2654435761u >> 13);
  const auto period = std::chrono::duration<double>(a.per / a.rate);
  auto next = std::chrono::steady_clock::now();
  for (std::uint32_t sent = 0; sent < a.samples; sent += a.per) {
    std::uint32_t header[2] = {a.per, static_cast<std::uint32_t>(a.bytes)};
    iovec v[2] = {{header, sizeof header}, {pixels.data(), pixels.size()}};
    if (!send_all(fd, v, 2)) _exit(3);
    next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(period);
    std::this_thread::sleep_until(next);
  }
  _exit(0);
}

double micros(const timeval& t) { return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_usec); }

// One run of one way; false when the sender or the connection failed.
bool run(const Args& a, bool direct) {
  const int ls = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof at;
  if (ls < 0 || bind(ls, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0 || listen(ls, 1) != 0 ||
      getsockname(ls, reinterpret_cast<sockaddr*>(&at), &len) != 0) {
    std::perror("stoker_bench_tcp_floor: listen");
    return false;
  }
  const pid_t child = fork();
  if (child == 0) sender(a, at);
  pin(a.receiver_core);
  const int fd = accept(ls, nullptr, nullptr);
  close(ls);
  // The ring: as many slots as a prefetch of 4 batches of 64, shared memory, touched once
  // beforehand (a daemon's ring is reused epoch after epoch).
  const std::size_t slots = 256;
  const std::size_t ring_bytes = slots * a.bytes;
  void* mapped = mmap(nullptr, ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (fd < 0 || mapped == MAP_FAILED) {
    std::perror("stoker_bench_tcp_floor: accept/mmap");
    return false;
  }
  auto* ring = static_cast<char*>(mapped);
  std::memset(ring, 0, ring_bytes);
  const std::size_t message = a.bytes * a.per;
  std::vector<char> buffer(a.chunk == 0 ? message : std::min(a.chunk, message));
  rusage r0{}, r1{};
  getrusage(RUSAGE_SELF, &r0);
  std::uint64_t got = 0, slot = 0;
  bool ok = true;
  while (got < a.samples) {
    std::uint32_t header[2];
    if (!recv_all(fd, header, sizeof header) || header[0] != a.per || header[1] != a.bytes) {
      ok = false;
      break;
    }
    if (direct) {
      for (std::uint32_t i = 0; i < header[0] && ok; ++i) ok = recv_all(fd, ring + (slot++ % slots) * a.bytes, a.bytes);
    } else {
      // The message's bytes, a buffer-full at a time, each copied on into the slots it covers.
      for (std::size_t at = 0; at < message && ok;) {
        const std::size_t n = std::min(buffer.size(), message - at);
        ok = recv_all(fd, buffer.data(), n);
        for (std::size_t done = 0; done < n && ok;) {
          const std::size_t sample = (at + done) / a.bytes, offset = (at + done) % a.bytes;
          const std::size_t k = std::min(n - done, a.bytes - offset);
          std::memcpy(ring + ((slot + sample) % slots) * a.bytes + offset, buffer.data() + done, k);
          done += k;
        }
        at += n;
      }
      slot += header[0];
    }
    if (!ok) break;
    got += header[0];
  }
  getrusage(RUSAGE_SELF, &r1);
  int status = 0;
  waitpid(child, &status, 0);
  close(fd);
  munmap(mapped, ring_bytes);
  if (!ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "stoker_bench_tcp_floor: the sender failed (status %d)\n", status);
    return false;
  }
  const double n = static_cast<double>(got);
  const double user = (micros(r1.ru_utime) - micros(r0.ru_utime)) / n;
  const double sys = (micros(r1.ru_stime) - micros(r0.ru_stime)) / n;
  const double switches = static_cast<double>((r1.ru_nvcsw - r0.ru_nvcsw) + (r1.ru_nivcsw - r0.ru_nivcsw)) / n;
  std::printf(
      "tcp floor %-6s %llu samples of %zu bytes, %u a message, %.0f/s: user %.1f us sys %.1f us total %.1f us/sample, "
      "switches %.2f/sample\n",
      direct ? "direct" : "copy", static_cast<unsigned long long>(got), a.bytes, a.per, a.rate, user, sys, user + sys,
      switches);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (argc > 1) a.bytes = std::strtoull(argv[1], nullptr, 10);
  if (argc > 2) a.per = static_cast<std::uint32_t>(std::atoi(argv[2]));
  if (argc > 3) a.rate = std::atof(argv[3]);
  if (argc > 4) a.samples = static_cast<std::uint32_t>(std::atoi(argv[4]));
  if (argc > 5) a.receiver_core = std::atoi(argv[5]);
  if (argc > 6) a.sender_core = std::atoi(argv[6]);
  if (argc > 7) a.chunk = std::strtoull(argv[7], nullptr, 10);
  if (a.bytes == 0 || a.bytes > (1u << 30) || a.per == 0 || a.per > 64 || !(a.rate > 0) || a.samples == 0) {
    std::fprintf(stderr,
                 "usage: stoker_bench_tcp_floor [bytes] [per 1-64] [rate/s] [samples] [receiver core] [sender core] "
                 "[copy chunk]\n");
    return 2;
  }
  a.samples = std::max(a.samples, a.per);
  return run(a, true) && run(a, false) ? 0 : 1;
}
