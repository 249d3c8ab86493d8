// A minimal HTTP/1.1 object server for scripts/bench-objstore.py: GET (whole or one
// `Range: bytes=a-b`) and HEAD of ROOT/KEY for the path /BUCKET/KEY, keep-alive, a thread per
// connection. What it is for: measuring how stokerd hides a link's latency, with a server that
// costs next to nothing per request (s3rver, the tests' S3 server, spends milliseconds of CPU
// on each, which on a 2-core machine measures s3rver). It checks no signature and lists
// nothing; never a server for anything but a benchmark on loopback.
//
//   stoker_bench_range_server ROOT      prints "listening on 127.0.0.1:PORT", serves until killed
//   stoker_bench_range_server ROOT --synthetic CLASSES PER_CLASS JPEG
//       also answers ListObjectsV2 for an ImageFolder of CLASSES x PER_CLASS keys under
//       train/ (train/cNNNN/img_NNNNNNN.jpg), each of them the bytes of JPEG: a 1.28 M-object
//       bucket for the listing benchmark without 1.28 M files.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Synthetic {
  long classes = 0, per_class = 0;
  std::string jpeg;
};
Synthetic synthetic;

std::string query_value(const std::string& query, const std::string& name) {
  const std::string key = name + "=";
  for (std::size_t a = 0; a <= query.size();) {
    std::size_t b = query.find('&', a);
    if (b == std::string::npos) b = query.size();
    if (query.compare(a, key.size(), key) == 0) {
      std::string v, enc = query.substr(a + key.size(), b - a - key.size());
      for (std::size_t i = 0; i < enc.size(); ++i) {
        if (enc[i] == '%' && i + 2 < enc.size()) {
          v += static_cast<char>(std::stoi(enc.substr(i + 1, 2), nullptr, 16));
          i += 2;
        } else {
          v += enc[i];
        }
      }
      return v;
    }
    a = b + 1;
  }
  return {};
}

// A ListObjectsV2 page of the synthetic ImageFolder for `query`.
std::string synthetic_listing(const std::string& query) {
  const std::string prefix = query_value(query, "prefix"), delimiter = query_value(query, "delimiter");
  std::string xml = "<ListBucketResult>";
  char buf[96];
  if (delimiter == "/" && prefix == "train/") {
    xml += "<IsTruncated>false</IsTruncated>";
    for (long c = 0; c < synthetic.classes; ++c) {
      std::snprintf(buf, sizeof buf, "<CommonPrefixes><Prefix>train/c%04ld/</Prefix></CommonPrefixes>", c);
      xml += buf;
    }
  } else if (long c = 0; prefix.size() == 12 && std::sscanf(prefix.c_str(), "train/c%4ld/", &c) == 1) {
    const std::string token = query_value(query, "continuation-token");
    const long from = token.empty() ? 0 : std::atol(token.c_str());
    const long to = std::min(synthetic.per_class, from + 1000);
    xml += to < synthetic.per_class ? "<IsTruncated>true</IsTruncated><NextContinuationToken>" + std::to_string(to) +
                                          "</NextContinuationToken>"
                                    : std::string("<IsTruncated>false</IsTruncated>");
    for (long i = from; i < to; ++i) {
      std::snprintf(buf, sizeof buf, "<Contents><Key>train/c%04ld/img_%07ld.jpg</Key><Size>%zu</Size></Contents>", c, i,
                    synthetic.jpeg.size());
      xml += buf;
    }
  } else {
    xml += "<IsTruncated>false</IsTruncated>";
  }
  return xml + "</ListBucketResult>";
}

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
    const std::size_t q = path.find('?');
    const std::string query = q == std::string::npos ? "" : path.substr(q + 1);
    path = path.substr(0, q);
    if (synthetic.classes > 0 && query.find("list-type=2") != std::string::npos) {
      const std::string xml = synthetic_listing(query);
      answer(c, 200, "OK", "Content-Type: application/xml\r\n", xml.data(), xml.size());
      continue;
    }
    if (synthetic.classes > 0 && path.find("/train/c") != std::string::npos) {
      // Every synthetic key is the one JPEG (whole, or the range asked for).
      const std::string& j = synthetic.jpeg;
      unsigned long long a = 0, b = j.size() - 1;
      const std::size_t r = head.find("\r\nRange: bytes=");
      const bool ranged = r != std::string::npos && std::sscanf(head.c_str() + r + 15, "%llu-%llu", &a, &b) == 2 &&
                          a <= b && b < j.size();
      answer(c, ranged ? 206 : 200, ranged ? "Partial Content" : "OK", "", j.data() + a,
             static_cast<std::size_t>(b - a + 1));
      continue;
    }
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
  if (argc != 2 && !(argc == 6 && std::string(argv[2]) == "--synthetic")) {
    std::fprintf(stderr, "usage: stoker_bench_range_server ROOT [--synthetic CLASSES PER_CLASS JPEG]\n");
    return 2;
  }
  if (argc == 6) {
    synthetic.classes = std::atol(argv[3]);
    synthetic.per_class = std::atol(argv[4]);
    const int fd = ::open(argv[5], O_RDONLY | O_CLOEXEC);
    char buf[65536];
    for (ssize_t k; fd >= 0 && (k = ::read(fd, buf, sizeof buf)) > 0;) synthetic.jpeg.append(buf, static_cast<std::size_t>(k));
    if (fd >= 0) ::close(fd);
    if (synthetic.classes <= 0 || synthetic.classes > 1000 || synthetic.per_class <= 0 || synthetic.jpeg.empty()) {
      std::fprintf(stderr, "--synthetic: 1..1000 classes, PER_CLASS > 0 and a readable JPEG\n");
      return 2;
    }
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
