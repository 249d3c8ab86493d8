// A minimal HTTP/1.1 object server for scripts/bench-objstore.py: GET (whole or one
// `Range: bytes=a-b`) and HEAD of ROOT/KEY for the path /BUCKET/KEY, keep-alive, a thread per
// connection. What it is for: measuring how stokerd hides a link's latency, with a server that
// costs next to nothing per request (s3rver, the tests' S3 server, spends milliseconds of CPU
// on each, which on a 2-core machine measures s3rver). It checks no signature and lists
// nothing; never a server for anything but a benchmark on loopback.
//
//   stoker_bench_range_server ROOT      prints "listening on 127.0.0.1:PORT", serves until killed
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

bool send_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

void answer(int c, int code, const char* reason, const std::string& headers, const char* body, std::size_t n) {
  const std::string head = "HTTP/1.1 " + std::to_string(code) + " " + reason + "\r\nContent-Length: " +
                           std::to_string(n) + "\r\n" + headers + "\r\n";
  if (send_all(c, head.data(), head.size()) && n > 0) send_all(c, body, n);
}

void serve(int c, std::string root) {
  std::string buf;
  std::vector<char> data;
  char chunk[16384];
  for (;;) {
    std::size_t end;
    while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t k = ::recv(c, chunk, sizeof chunk, 0);
      if (k <= 0) {
        ::close(c);
        return;
      }
      buf.append(chunk, static_cast<std::size_t>(k));
    }
    const std::string head = buf.substr(0, end);
    buf.erase(0, end + 4);
    const bool is_head = head.rfind("HEAD ", 0) == 0;
    const std::size_t p0 = head.find(' ') + 1, p1 = head.find(' ', p0);
    std::string path = head.substr(p0, p1 - p0);
    path = path.substr(0, path.find('?'));
    const std::size_t key_at = path.find('/', 1);  // skip /BUCKET
    const std::string file = root + "/" + (key_at == std::string::npos ? "" : path.substr(key_at + 1));
    if (file.find("..") != std::string::npos) {
      answer(c, 403, "Forbidden", "", nullptr, 0);
      continue;
    }
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      if (fd >= 0) ::close(fd);
      answer(c, 404, "Not Found", "", nullptr, 0);
      continue;
    }
    const auto size = static_cast<unsigned long long>(st.st_size);
    unsigned long long a = 0, b = size - 1;
    bool ranged = false;
    if (const std::size_t r = head.find("\r\nRange: bytes="); r != std::string::npos) {
      ranged = std::sscanf(head.c_str() + r + 15, "%llu-%llu", &a, &b) == 2 && a <= b && b < size;
      if (!ranged) {
        ::close(fd);
        answer(c, 416, "Range Not Satisfiable", "", nullptr, 0);
        continue;
      }
    }
    const std::size_t n = size == 0 ? 0 : static_cast<std::size_t>(b - a + 1);
    const std::string headers = "Last-Modified: Sat, 28 Nov 2026 08:00:00 GMT\r\n" +
                                (ranged ? "Content-Range: bytes " + std::to_string(a) + "-" + std::to_string(b) + "/" +
                                              std::to_string(size) + "\r\n"
                                        : std::string());
    if (is_head) {
      const std::string h = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(size) + "\r\n" + headers + "\r\n";
      send_all(c, h.data(), h.size());
      ::close(fd);
      continue;
    }
    data.resize(n);
    std::size_t got = 0;
    while (got < n) {
      const ssize_t k = ::pread(fd, data.data() + got, n - got, static_cast<off_t>(a + got));
      if (k <= 0) break;
      got += static_cast<std::size_t>(k);
    }
    ::close(fd);
    answer(c, ranged ? 206 : 200, ranged ? "Partial Content" : "OK", headers, data.data(), got);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: stoker_bench_range_server ROOT\n");
    return 2;
  }
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(s, 128) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("listen");
    return 1;
  }
  std::printf("listening on 127.0.0.1:%d\n", ntohs(addr.sin_port));
  std::fflush(stdout);
  for (;;) {
    const int c = ::accept4(s, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    const int one = 1;
    ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::thread(serve, c, std::string(argv[1])).detach();
  }
}
