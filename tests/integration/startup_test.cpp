// Integration tier: what happens at start — refused configs, a second daemon, stale leftovers,
// and a client that speaks another protocol version.
#include <catch2/catch.hpp>
#include <cerrno>
#include <sys/stat.h>
#include <fcntl.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <fstream>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>

#include "daemon_fixture.hpp"
#include "stoker/proto/control.hpp"
#include "stoker/proto/names.hpp"
#include "stoker/stoker.hpp"

using namespace stoker::test;
namespace fs = std::filesystem;

TEST_CASE("a bad config is refused with file:line:col and key, leaving nothing behind",
          "[integration]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  const fs::path cfg = dir.path() / "bad.yaml";
  std::ofstream(cfg) << "jobs:\n"
                        "  demo:\n"
                        "    source: {type: imagefolder, root: \"" << data_dir() << "/demo\"}\n"
                        "    batch_size: 0\n"
                        "    pipeline:\n"
                        "      - decode: {}\n"
                        "      - random_resized_crop: {size: 32}\n"
                        "    output: {dtype: uint8, layout: NCHW}\n";
  std::string out;
  const int rc = run_program({bin("stokerd"), "--config", cfg.string(), "--socket", socket}, out);
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains(cfg.string() + ":4:") && Catch::Contains("batch_size"));
  CHECK_FALSE(fs::exists(socket));
  CHECK(shm_objects_containing(stoker::proto::segment_name(socket, "demo")).empty());
}

TEST_CASE("a root without images is refused naming the root key", "[integration]") {
  TempDir dir;
  fs::create_directories(dir.path() / "empty" / "cls");
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec j;
  j.root = (dir.path() / "empty").string();
  std::string out;
  const int rc = run_program(
      {bin("stokerd"), "--config", write_config(dir.path(), {j}, 1).string(), "--socket", socket}, out);
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("stoker.yaml:") && Catch::Contains("source.root"));
  CHECK_FALSE(fs::exists(socket));
}

TEST_CASE("a second stokerd on the same socket refuses to start", "[integration]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  const auto cfg = write_config(dir.path(), {JobSpec{}}, 1);
  Daemon first(cfg, socket);
  std::string out;
  const int rc = run_program({bin("stokerd"), "--config", cfg.string(), "--socket", socket}, out);
  CHECK(rc != 0);
  CHECK_THAT(out, Catch::Contains("already running on " + socket) &&
                      Catch::Contains(std::to_string(first.pid())));
  // ...and the first one still serves.
  stoker::ClientOptions o;
  o.socket_path = socket;
  stoker::Client c("demo", 0, o);
  CHECK(c.next(30000).count() == 8);
}

TEST_CASE("a killed daemon leaves no segment behind - its stale socket is cleaned at the next start",
          "[integration]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  const auto cfg = write_config(dir.path(), {JobSpec{}}, 1);
  {
    Daemon d(cfg, socket);
    d.kill9();
  }
  CHECK(fs::exists(socket));  // left behind by the crash
  CHECK(shm_objects_containing(stoker::proto::segment_name(socket, "demo")).empty());
  Daemon d(cfg, socket);
  stoker::ClientOptions o;
  o.socket_path = socket;
  stoker::Client c("demo", 0, o);
  CHECK(c.next(30000).index() == 0);
  CHECK(d.stop() == 0);
  CHECK(shm_objects_containing(stoker::proto::segment_name(socket, "demo")).empty());
}

TEST_CASE("a segment has no name and nobody can resize it, not even through /proc", "[integration]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {JobSpec{}}, 1), socket);
  const std::string seg = stoker::proto::segment_name(socket, "demo");
  CHECK_FALSE(fs::exists(fs::path("/dev/shm") / seg));
  const std::string path = memfd_of(d.pid(), seg);
  REQUIRE(!path.empty());
  const int fd = ::open(path.c_str(), O_RDWR);  // what a same-user process could do
  REQUIRE(fd >= 0);
  struct stat st {};
  REQUIRE(::fstat(fd, &st) == 0);
  CHECK(::ftruncate(fd, 0) != 0);
  CHECK(errno == EPERM);
  CHECK(::ftruncate(fd, st.st_size * 2) != 0);
  CHECK(errno == EPERM);
  ::close(fd);
  stoker::ClientOptions o;
  o.socket_path = socket;
  stoker::Client c("demo", 0, o);
  CHECK(c.next(30000).count() == 8);
}

TEST_CASE("a client of another protocol version is refused naming both versions",
          "[integration]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {JobSpec{}}, 1), socket);
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket.c_str(), sizeof(addr.sun_path) - 1);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  auto hello = stoker::proto::make_message<stoker::proto::HelloMsg>(stoker::proto::MsgType::kHello);
  hello.header.proto_major = 9;
  hello.header.proto_minor = 4;
  stoker::proto::copy_cstr(hello.job, "demo");
  REQUIRE(::send(fd, &hello, sizeof hello, 0) == static_cast<ssize_t>(sizeof hello));
  stoker::proto::ErrorMsg err{};
  REQUIRE(::recv(fd, &err, sizeof err, 0) == static_cast<ssize_t>(sizeof err));
  CHECK(err.code == static_cast<int>(stoker::proto::ErrorCode::kVersionMismatch));
  CHECK_THAT(std::string(err.message), Catch::Contains("protocol 9.4") && Catch::Contains("stokerd speaks " + std::to_string(stoker::proto::kProtoMajor) + "." + std::to_string(stoker::proto::kProtoMinor)));
  char b;
  CHECK(::recv(fd, &b, 1, 0) == 0);  // and the connection is closed
  ::close(fd);
}

TEST_CASE("both binaries answer --version, and stokerctl COMMAND --help shows that command", "[integration]") {
  std::string out;
  CHECK(run_program({bin("stokerctl"), "--version"}, out) == 0);
  CHECK_THAT(out, Catch::StartsWith("stokerctl ") && Catch::Contains("(protocol " + std::to_string(stoker::proto::kProtoMajor)));
  CHECK(run_program({bin("stokerd"), "--version"}, out) == 0);
  CHECK_THAT(out, Catch::StartsWith("stokerd ") && Catch::Contains("protocol"));
  CHECK(run_program({bin("stokerctl"), "consume", "--help"}, out) == 0);
  CHECK_THAT(out, Catch::StartsWith("usage: stokerctl consume --job NAME") && Catch::Contains("--device cuda[:N]") &&
                      !Catch::Contains("status [--socket"));
  CHECK(run_program({bin("stokerctl"), "status", "--help"}, out) == 0);
  CHECK_THAT(out, Catch::StartsWith("usage: stokerctl status"));
  CHECK(run_program({bin("stokerd"), "--help"}, out) == 0);
  CHECK_THAT(out, Catch::Contains("$STOKER_SOCKET") && Catch::Contains("$XDG_RUNTIME_DIR/stoker/stoker.sock") &&
                      Catch::Contains("/run/stoker/stoker.sock"));
}

TEST_CASE("under systemd (Type=notify) stokerd reports READY=1 with a status line and feeds the watchdog",
          "[integration][systemd]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  const std::string notify = (dir.path() / "notify.sock").string();
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, notify.c_str(), sizeof addr.sun_path - 1);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  ::setenv("NOTIFY_SOCKET", notify.c_str(), 1);
  ::setenv("WATCHDOG_USEC", "400000", 1);  // fed every 0.2 s
  auto d = std::make_unique<Daemon>(write_config(dir.path(), {JobSpec{}}, 1), socket);
  ::unsetenv("NOTIFY_SOCKET");
  ::unsetenv("WATCHDOG_USEC");
  std::string all;
  int watchdogs = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  timeval tv{0, 200000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  while (std::chrono::steady_clock::now() < until && watchdogs < 3) {
    char buf[512];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) continue;
    const std::string m(buf, static_cast<std::size_t>(n));
    all += m + "|";
    watchdogs += m == "WATCHDOG=1" ? 1 : 0;
  }
  CHECK_THAT(all, Catch::Contains("READY=1\nSTATUS=serving 1 job(s) (demo) on " + socket));
  CHECK(watchdogs >= 3);
  CHECK(d->stop() == 0);
  char buf[512];
  std::string last;
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) last = std::string(buf, static_cast<std::size_t>(n));
  CHECK(last == "STOPPING=1");
  ::close(fd);
}

TEST_CASE("the start log says which file extensions the scan found", "[integration]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {JobSpec{}}, 1), socket);
  CHECK_THAT(d.log(), Catch::Contains("job demo: files by extension: jpg 64"));
}

TEST_CASE("SIGTERM leaves the socket folder as it was found - no socket, no lock file", "[integration]") {
  TempDir dir;
  const fs::path run = dir.path() / "run";  // created by stokerd, as /run/stoker would be
  const auto socket = (run / "stoker.sock").string();
  const auto cfg = write_config(dir.path(), {JobSpec{}}, 1);
  {
    Daemon d(cfg, socket);
    CHECK(fs::exists(socket + ".lock"));  // held while it runs
    CHECK(d.stop() == 0);
  }
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(run)) left.push_back(e.path().filename().string());
  CHECK(left == std::vector<std::string>{});
  // ...and the next daemon starts there and serves.
  Daemon again(cfg, socket);
  stoker::ClientOptions o;
  o.socket_path = socket;
  stoker::Client c("demo", 0, o);
  CHECK(c.next(30000).count() == 8);
}
