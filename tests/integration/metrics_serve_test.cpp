// Integration tier of the operations features (#11): GET /metrics over a real TCP socket from
// a real stokerd (values that must move, garbage that must not hurt), the node_exporter
// textfile, the trainer wait the client reports with each release (protocol 2.3, and the
// 24-byte Release of 2.1 clients still accepted), `stokerctl top -n 2`, and `stokerctl
// preview` checked pixel for pixel against the batch a trainer gets.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <fstream>
#include <png.h>
#include <poll.h>
#include <random>
#include <regex>
#include <sstream>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "batch_copy.hpp"
#include "daemon_fixture.hpp"
#include "loopback.hpp"
#include "status_json.hpp"
#include "stoker/proto/control.hpp"
#include "stoker/stoker.hpp"

using namespace stoker::test;
using Clock = std::chrono::steady_clock;

namespace {

// The TCP port of the daemon's /metrics, from its status ("http://127.0.0.1:PORT/metrics").
int metrics_port(const std::string& socket) {
  const std::string url = status_json(socket).at("metrics").get<std::string>();
  const auto colon = url.rfind(':');
  return std::stoi(url.substr(colon + 1));
}

int tcp_connect(int port) { return stoker::test::connect_loopback(static_cast<std::uint16_t>(port)); }

// Sends `request` and reads until the server closes (or timeout_s passes).
std::string http_exchange(int port, const std::string& request, int timeout_s = 10) {
  const int fd = tcp_connect(port);
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  const auto until = Clock::now() + std::chrono::seconds(timeout_s);
  char buf[4096];
  while (Clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

// Value of the sample whose line starts with `series` + " " (-1 when absent).
double sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

std::string get_metrics(int port) {
  const std::string r = http_exchange(port, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
  REQUIRE_THAT(r, Catch::StartsWith("HTTP/1.0 200 OK\r\n"));
  REQUIRE_THAT(r, Catch::Contains("Content-Type: text/plain; version=0.0.4"));
  return r.substr(r.find("\r\n\r\n") + 4);
}

// Polls `probe` (a metric document -> value) until `pred` holds, at most 10 s (the document
// is rendered once a second).
template <class Pred>
double wait_metric(int port, const std::string& series, Pred pred) {
  double v = -1;
  for (const auto until = Clock::now() + std::chrono::seconds(10); Clock::now() < until;) {
    v = sample(get_metrics(port), series);
    if (pred(v)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return v;
}

}  // namespace

TEST_CASE("GET /metrics serves counters that move, and garbage requests do not hurt the daemon",
          "[integration][metrics]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  const auto prom = dir.path() / "prom";
  std::filesystem::create_directories(prom);
  JobSpec j;
  j.prefetch = 2;
  Daemon d(write_config(dir.path(), {j}, 2, "  metrics: \"127.0.0.1:0\"\n  metrics_textfile: " + prom.string() + "\n"),
           socket);
  const int port = metrics_port(socket);
  REQUIRE(port > 0);

  // Prefetch fills the ring (2 batches of 8), then the counter stands still until consumed.
  const std::string samples = "stoker_job_samples_total{job=\"demo\"}";
  const double before = wait_metric(port, samples, [](double v) { return v >= 16; });
  REQUIRE(before >= 16);
  const std::string text = get_metrics(port);
  CHECK_THAT(text, Catch::Contains("# TYPE stoker_job_samples_total counter"));
  CHECK(sample(text, "stoker_ring_slots{job=\"demo\",rank=\"0\",state=\"ready\"}") >= 0);
  CHECK(sample(text, "stoker_job_decode_errors_total{job=\"demo\",kind=\"corrupt\"}") == 0);
  CHECK(sample(text, "stoker_resident_memory_bytes") > 1e6);
  CHECK(sample(text, "stoker_job_bytes_read_total{job=\"demo\"}") > 0);
  CHECK(sample(text, "stoker_workers") == 2);
  {
    stoker::Client c("demo", 0, at(socket));
    for (int i = 0; i < 5; ++i) c.next(30000).reset();
  }
  const double after = wait_metric(port, samples, [&](double v) { return v >= before + 8 * 5; });
  CHECK(after >= before + 8 * 5);
  CHECK(wait_metric(port, "stoker_consumer_releases_total{job=\"demo\",rank=\"0\",reader=\"0\"}",
                    [](double v) { return v == 5; }) == 5);
  CHECK(sample(get_metrics(port), "stoker_consumer_connected{job=\"demo\",rank=\"0\",reader=\"0\"}") == 0);

  // The textfile holds the same families, replaced whole.
  std::ifstream in(prom / "stoker.prom");
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(sample(file, samples) >= before);

  // Garbage: each gets a 4xx or is dropped; none crashes or wedges the responder.
  CHECK_THAT(http_exchange(port, "GET / HTTP/1.0\r\n\r\n"), Catch::StartsWith("HTTP/1.0 404"));
  CHECK_THAT(http_exchange(port, "DELETE /metrics HTTP/1.0\r\n\r\n"), Catch::StartsWith("HTTP/1.0 405"));
  const char tls_hello[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n";
  CHECK_THAT(http_exchange(port, std::string(tls_hello, sizeof tls_hello - 1)),
             Catch::StartsWith("HTTP/1.0 400"));  // a TLS hello (NULs and all), then a blank line
  // An unfinished head is dropped at the head timeout without an answer.
  CHECK(http_exchange(port, std::string("\x16\x03\x01\x02\x00", 5), 8).empty());
  CHECK_THAT(http_exchange(port, std::string(10000, 'A')), Catch::StartsWith("HTTP/1.0 431"));
  std::string binary(3000, '\0');
  for (std::size_t i = 0; i < binary.size(); ++i) binary[i] = static_cast<char>(i * 7919 % 251);
  http_exchange(port, binary, 2);
  {
    // More silent connections than the responder serves at once: the oldest silent ones are
    // closed to make room (or dropped at the 2 s head timeout), and a real request is answered.
    std::vector<int> silent;
    for (int i = 0; i < 20; ++i) silent.push_back(tcp_connect(port));
    const int half = tcp_connect(port);
    ::send(half, "GET /metr", 9, MSG_NOSIGNAL);
    // Answered at all: the 60 s is a guard against a hang, not a figure to meet (the machine
    // may be loaded).
    CHECK_THAT(http_exchange(port, "GET /metrics HTTP/1.0\r\n\r\n", 60), Catch::StartsWith("HTTP/1.0 200"));
    for (int fd : silent) ::close(fd);
    ::close(half);
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 300; ++i) {  // random bytes, then hang up without reading
    const int fd = tcp_connect(port);
    std::string junk(1 + rng() % 6000, '\0');
    for (char& ch : junk) ch = static_cast<char>(rng() % 3 == 0 ? "GET /metrics HTTP/1.0\r\n"[rng() % 24] : rng());
    ::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::close(fd);
  }
  for (int i = 0; i < 50; ++i) {  // connect and reset at once
    const int fd = tcp_connect(port);
    linger lg{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    ::close(fd);
  }
  CHECK(sample(get_metrics(port), samples) >= after);
  CHECK(::kill(d.pid(), 0) == 0);
  CHECK(d.stop() == 0);
}

TEST_CASE("a drained job leaves the metrics with its consumers' wait", "[integration][metrics]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec a, b;
  a.name = "a";
  b.name = "b";
  Daemon d(write_config(dir.path(), {a, b}, 1, "  metrics: \"127.0.0.1:0\"\n"), socket);
  const int port = metrics_port(socket);
  {
    stoker::Client c("b", 0, at(socket));
    c.next(30000).reset();
  }
  const std::string series = "stoker_consumer_releases_total{job=\"b\",rank=\"0\",reader=\"0\"}";
  REQUIRE(wait_metric(port, series, [](double v) { return v == 1; }) == 1);
  std::string out;
  REQUIRE(run_program({bin("stokerctl"), "drain", "b", "--socket", socket}, out) == 0);
  CHECK(wait_metric(port, series, [](double v) { return v == -1; }) == -1);  // gone
  const std::string text = get_metrics(port);
  CHECK(text.find("job=\"b\"") == std::string::npos);
  CHECK(sample(text, "stoker_job_samples_total{job=\"a\"}") >= 0);
}

TEST_CASE("a metrics port already taken stops the start with the address named", "[integration][metrics]") {
  TempDir dir;
  std::uint16_t port = 0;
  const int taken = stoker::test::loopback_socket(port);
  REQUIRE(::listen(taken, 1) == 0);
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  JobSpec j;
  std::string out;
  CHECK(run_program({bin("stokerd"), "--config", write_config(dir.path(), {j}, 1, "  metrics: \"" + addr + "\"\n").string(),
                     "--socket", (dir.path() / "s.sock").string()},
                    out) == 1);
  CHECK_THAT(out, Catch::Contains("cannot listen on " + addr));
  ::close(taken);
}

TEST_CASE("server.log_interval_s logs one throughput line per interval", "[integration][metrics]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec j;
  Daemon d(write_config(dir.path(), {j}, 1, "  log_interval_s: 1\n"), socket);
  stoker::Client c("demo", 0, at(socket));
  c.next(30000).reset();
  std::string log;
  for (const auto until = Clock::now() + std::chrono::seconds(10); Clock::now() < until;) {
    log = d.log();
    if (log.find("throughput: demo") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK_THAT(log, Catch::Contains("throughput: demo") && Catch::Contains("img/s") && Catch::Contains("workers") &&
                      Catch::Contains("rss"));
  // Off by default: the other daemons in these tests never log it.
  TempDir quiet_dir;
  Daemon quiet(write_config(quiet_dir.path(), {j}, 1), (quiet_dir.path() / "s.sock").string());
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  CHECK(quiet.log().find("throughput:") == std::string::npos);
}

TEST_CASE("a non-loopback metrics address is refused at its line unless allowed", "[integration][metrics]") {
  TempDir dir;
  JobSpec j;
  const auto config = write_config(dir.path(), {j}, 1, "  metrics: \"0.0.0.0:0\"\n");
  std::string out;
  CHECK(run_program({bin("stokerd"), "--config", config.string(), "--socket", (dir.path() / "s.sock").string()},
                    out) == 2);
  CHECK_THAT(out, Catch::Contains("server.metrics") && Catch::Contains("not a loopback"));
}

namespace {

struct WaitRun {
  double measured_s = 0;  // the test's own clock around next()
  double reported_s = 0;  // status wait_s of the consumer
  double elapsed_s = 0;
};

// Consumes `batches` holding each `hold_ms`, timing next(); then the daemon's view.
WaitRun consume_and_report(const std::string& socket, int batches, int hold_ms) {
  WaitRun r;
  const auto t0 = Clock::now();
  {
    stoker::Client c("demo", 0, at(socket));
    for (int i = 0; i < batches; ++i) {
      const auto a = Clock::now();
      stoker::Batch b = c.next(60000);
      r.measured_s += std::chrono::duration<double>(Clock::now() - a).count();
      if (hold_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
    }
  }
  r.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
  Json c;
  for (const auto until = Clock::now() + std::chrono::seconds(10); Clock::now() < until;) {
    c = status_json(socket)["jobs"][0]["consumers"][0];
    if (c["wait_reports"].get<int>() == batches) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(c["wait_reports"].get<int>() == batches);
  r.reported_s = c["wait_s"].get<double>();
  return r;
}

}  // namespace

TEST_CASE("trainer wait: a slow producer gives a large wait, a slow consumer a small one",
          "[integration][metrics][wait]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  SECTION("slow producer: one worker, big batches, one slot") {
    JobSpec j;
    j.batch_size = 64;
    j.prefetch = 1;
    j.out_size = 160;
    Daemon d(write_config(dir.path(), {j}, 1), socket);
    const WaitRun r = consume_and_report(socket, 6, 0);
    INFO("measured " << r.measured_s << " s, reported " << r.reported_s << " s, elapsed " << r.elapsed_s << " s");
    // What the client reported is what the trainer lived through (its clock sits inside ours).
    CHECK(r.reported_s <= r.measured_s + 0.005);
    CHECK(r.reported_s >= 0.9 * r.measured_s - 0.005);
    CHECK(r.reported_s / r.elapsed_s > 0.5);
  }
  SECTION("slow consumer: small batches, a full ring, 150 ms per step") {
    JobSpec j;
    j.batch_size = 4;
    j.prefetch = 4;
    Daemon d(write_config(dir.path(), {j}, 1), socket);
    // Let the ring fill first: a trainer that starts before its data is there waits once.
    for (const auto until = Clock::now() + std::chrono::seconds(10); Clock::now() < until;) {
      if (status_json(socket)["jobs"][0]["consumers"][0]["slots"]["ready"].get<int>() == 4) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const WaitRun r = consume_and_report(socket, 8, 150);
    INFO("measured " << r.measured_s << " s, reported " << r.reported_s << " s, elapsed " << r.elapsed_s << " s");
    CHECK(r.reported_s <= r.measured_s + 0.005);
    CHECK(r.reported_s / r.elapsed_s < 0.1);
  }
}

// WAIT% (`wait_fraction`, top's column) is the share of the time the consumer has been
// connected, at most the last 10 s: a trainer that joined a daemon running for a while and has
// waited all along is not shown as waiting a fraction of the time. Compared with the test's own
// clock, not with a figure.
TEST_CASE("trainer wait share counts only the time since the consumer connected",
          "[integration][metrics][wait][top]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec j;  // a slow producer: the trainer waits for nearly every batch
  j.batch_size = 64;
  j.prefetch = 1;
  j.out_size = 160;
  Daemon d(write_config(dir.path(), {j}, 1), socket);
  std::this_thread::sleep_for(std::chrono::seconds(3));  // the daemon's window fills with idle time
  const auto connect = Clock::now();
  const WaitRun r = consume_and_report(socket, 6, 0);
  // A sample of the window taken after the last release, so it holds all six waits.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const Json c = status_json(socket)["jobs"][0]["consumers"][0];
  const double connected_s = std::chrono::duration<double>(Clock::now() - connect).count();
  const double share = c["wait_fraction"].get<double>();
  INFO("waited " << r.reported_s << " s of " << connected_s << " s connected; wait_fraction " << share);
  REQUIRE(r.reported_s / r.elapsed_s > 0.5);  // the trainer did wait most of the time
  // At least about the share of our own connected time (the daemon's is shorter; past 10 s
  // the window counts the same mix of waiting and idle). Counted over the daemon's whole
  // uptime it was W / (3 s + connected), below this on any machine that connects in < 12 s.
  CHECK(share >= 0.8 * r.reported_s / connected_s);
  CHECK(share <= 1.0);
}

TEST_CASE("a 24-byte Release of a protocol 2.1 client is still accepted, without a wait",
          "[integration][metrics][wait]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec j;
  Daemon d(write_config(dir.path(), {j}, 1), socket);
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket.c_str(), sizeof(addr.sun_path) - 1);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  ::timeval tv{20, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  auto h = stoker::proto::make_message<stoker::proto::HelloMsg>(stoker::proto::MsgType::kHello);
  h.header.proto_minor = 1;
  stoker::proto::copy_cstr(h.job, "demo");
  ::send(fd, &h, sizeof h, 0);
  stoker::proto::WelcomeMsg w{};
  REQUIRE(::recv(fd, &w, sizeof w, 0) == static_cast<ssize_t>(sizeof w));
  CHECK(w.header.proto_minor == stoker::proto::kProtoMinor);
  for (int i = 0; i < 2; ++i) {
    auto a = stoker::proto::make_message<stoker::proto::AcquireMsg>(stoker::proto::MsgType::kAcquire);
    a.header.proto_minor = 1;
    ::send(fd, &a, sizeof a, 0);
    stoker::proto::BatchMsg b{};
    REQUIRE(::recv(fd, &b, sizeof b, 0) == static_cast<ssize_t>(sizeof b));  // not evicted
    REQUIRE(b.header.type == static_cast<std::uint16_t>(stoker::proto::MsgType::kBatch));
    auto r = stoker::proto::make_message<stoker::proto::ReleaseMsg>(stoker::proto::MsgType::kRelease);
    r.header.proto_minor = 1;
    r.header.size = stoker::proto::kReleaseV21Bytes;
    r.slot = b.slot;
    r.generation = b.generation;
    REQUIRE(::send(fd, &r, stoker::proto::kReleaseV21Bytes, 0) == 24);
  }
  Json c;
  for (const auto until = Clock::now() + std::chrono::seconds(10); Clock::now() < until;) {
    c = status_json(socket)["jobs"][0]["consumers"][0];
    if (c["released"].get<int>() == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(c["released"].get<int>() == 2);
  CHECK(c["wait_reports"].get<int>() == 0);
  CHECK(c["connected"].get<bool>());
  // A Release of any other size is still a bad message: evicted.
  auto r = stoker::proto::make_message<stoker::proto::ReleaseMsg>(stoker::proto::MsgType::kRelease);
  r.header.size = 28;
  ::send(fd, &r, 28, 0);
  stoker::proto::ErrorMsg err{};
  REQUIRE(::recv(fd, &err, sizeof err, 0) == static_cast<ssize_t>(sizeof err));
  CHECK_THAT(std::string(err.message), Catch::Contains("size 28"));
  ::close(fd);
}

TEST_CASE("stokerctl top -n 2 prints two 80-column frames of jobs and consumers", "[integration][metrics][top]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec j;
  j.consumers = 2;
  Daemon d(write_config(dir.path(), {j}, 1), socket);
  stoker::Client c("demo", 1, at(socket));
  c.next(30000).reset();
  std::string out;
  REQUIRE(run_program({bin("stokerctl"), "top", "--socket", socket, "-n", "2", "-d", "0.2"}, out) == 0);
  std::size_t frames = 0, pos = 0;
  while ((pos = out.find("stokerd pid ", pos)) != std::string::npos) ++frames, ++pos;
  CHECK(frames == 2);
  CHECK(out.find("\x1b[2J") == std::string::npos);  // not a terminal: no clear codes
  std::istringstream in(out);
  std::size_t rows = 0;
  for (std::string line; std::getline(in, line);) {
    INFO(line);
    CHECK(line.size() <= 80);
    // The header keeps its clients count whole (it was cut at column 71), clock at the end.
    if (line.rfind("stokerd pid ", 0) == 0) {
      CHECK(std::regex_search(line, std::regex("  clients [0-9]+ +[0-9]{2}:[0-9]{2}:[0-9]{2}$")));
    }
    if (line.rfind("demo ", 0) == 0) CHECK_THAT(line, Catch::Contains("serving"));
    // Rank rows: "      1    - yes ..." for the connected one.
    if (line.find("    1    - yes") != std::string::npos) ++rows;
  }
  CHECK(rows == 2);  // rank 1 connected, in each frame
  CHECK_THAT(out, Catch::Contains("WAIT%"));
  REQUIRE(run_program({bin("stokerctl"), "top", "--socket", socket, "-n", "1", "--clear"}, out) == 0);
  CHECK_THAT(out, Catch::StartsWith("\x1b[H\x1b[2J"));
  CHECK(run_program({bin("stokerctl"), "top", "-n", "x"}, out) == 2);
}

namespace {

struct Png {
  std::uint32_t width = 0, height = 0;
  std::vector<std::uint8_t> rgb;
};

Png read_png(const std::string& path) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  REQUIRE(png_image_begin_read_from_file(&img, path.c_str()) != 0);
  img.format = PNG_FORMAT_RGB;
  Png p;
  p.width = img.width;
  p.height = img.height;
  p.rgb.resize(PNG_IMAGE_SIZE(img));
  REQUIRE(png_image_finish_read(&img, nullptr, p.rgb.data(), 0, nullptr) != 0);
  return p;
}

// Runs preview on `job` and checks every tile's pixels against batch 0 of epoch 0 as a
// trainer gets it, de-normalized with `mean`/`stdv` for float output.
void check_preview(const std::string& socket, const std::filesystem::path& dir, const std::string& job,
                   const std::array<float, 3>& mean, const std::array<float, 3>& stdv) {
  const auto png_path = dir / (job + ".png");
  std::string out;
  REQUIRE(run_program({bin("stokerctl"), "preview", job, "--socket", socket, "--out", png_path.string()}, out) == 0);
  const Json summary = Json::parse(out.substr(out.find('{')));
  const Png png = read_png(png_path.string());

  stoker::Client c(job, 0, at(socket));
  const stoker::Batch b = c.next(30000);
  const auto& info = c.info();
  const int n = static_cast<int>(b.count()), H = static_cast<int>(info.height), W = static_cast<int>(info.width);
  const int cols = static_cast<int>(std::ceil(std::sqrt(n)));
  const int rows = (n + cols - 1) / cols;
  // Size from the documented geometry: 4 px around tiles, a 12 px label strip under each.
  CHECK(png.width == static_cast<std::uint32_t>(4 + cols * (W + 4)));
  CHECK(png.height == static_cast<std::uint32_t>(4 + rows * (H + 12 + 4)));
  CHECK(summary["count"] == n);
  std::size_t mismatches = 0, checked = 0;
  for (int k = 0; k < n; ++k) {
    CHECK(summary["tiles"][k]["id"] == b.ids()[k]);
    CHECK(summary["tiles"][k]["label"] == b.labels()[k]);
    const int x0 = 4 + (k % cols) * (W + 4), y0 = 4 + (k / cols) * (H + 12 + 4);
    CHECK(summary["tiles"][k]["x"] == x0);
    CHECK(summary["tiles"][k]["y"] == y0);
    for (int y = 0; y < H; ++y) {
      for (int x = 0; x < W; ++x) {
        for (int ch = 0; ch < 3; ++ch) {
          int want;
          if (info.dtype == STOKER_UINT8) {
            const std::size_t at = info.layout == STOKER_NCHW ? (static_cast<std::size_t>(ch) * H + y) * W + x
                                                               : (static_cast<std::size_t>(y) * W + x) * 3 + ch;
            want = b.images()[k * info.image_bytes + at];
          } else {
            REQUIRE(info.dtype == STOKER_FLOAT32);
            const std::size_t at = (static_cast<std::size_t>(ch) * H + y) * W + x;
            const float v = b.images<float>()[k * info.image_bytes / 4 + at];
            want = static_cast<int>(std::lround(std::clamp((v * stdv[ch] + mean[ch]) * 255.0f, 0.0f, 255.0f)));
          }
          const int got = png.rgb[(static_cast<std::size_t>(y0 + y) * png.width + x0 + x) * 3 + ch];
          mismatches += got != want ? 1 : 0;
          ++checked;
        }
      }
    }
  }
  CHECK(checked == static_cast<std::size_t>(n) * H * W * 3);
  CHECK(mismatches == 0);
  // Labels are drawn: the strip under the first tile has ink (near white) on the background.
  std::size_t ink = 0;
  for (int y = 4 + H; y < 4 + H + 12; ++y) {
    for (int x = 4; x < 4 + W; ++x) ink += png.rgb[(static_cast<std::size_t>(y) * png.width + x) * 3] > 200 ? 1 : 0;
  }
  CHECK(ink > 5);
}

}  // namespace

TEST_CASE("stokerctl preview writes a contact sheet whose tiles are the batch's pixels",
          "[integration][metrics][preview]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec f;
  f.name = "norm";
  f.pipeline_yaml =
      "    pipeline:\n      - decode: {}\n      - random_resized_crop: {size: 24}\n"
      "      - horizontal_flip: {p: 0.5}\n"
      "      - normalize: {mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}\n"
      "    output: {dtype: float32, layout: NCHW}\n";
  JobSpec u;
  u.name = "raw";
  u.batch_size = 5;
  u.pipeline_yaml =
      "    pipeline:\n      - decode: {}\n      - random_resized_crop: {size: [20, 28]}\n"
      "    output: {dtype: uint8, layout: NHWC}\n";
  Daemon d(write_config(dir.path(), {f, u}, 2), socket);
  check_preview(socket, dir.path(), "norm", {0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f});
  check_preview(socket, dir.path(), "raw", {0, 0, 0}, {1, 1, 1});

  // While a trainer holds the rank, preview is refused instead of taking its batches.
  stoker::Client trainer("raw", 0, at(socket));
  std::string out;
  CHECK(run_program({bin("stokerctl"), "preview", "raw", "--socket", socket, "--out", (dir.path() / "x.png").string()},
                    out) == 1);
  CHECK_THAT(out, Catch::Contains("already has a consumer"));
  CHECK_FALSE(std::filesystem::exists(dir.path() / "x.png"));
  CHECK(run_program({bin("stokerctl"), "preview", "nosuch", "--socket", socket, "--out", "y.png"}, out) == 1);
  CHECK_THAT(out, Catch::Contains("no job 'nosuch'"));
}
