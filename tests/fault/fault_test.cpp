// Fault tier: consumers killed while holding leases, a daemon killed under a waiting consumer,
// garbage from a client, and broken images in the dataset.
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <set>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "batch_copy.hpp"
#include "daemon_fixture.hpp"
#include "stoker/proto/control.hpp"
#include "stoker/stoker.hpp"

using namespace stoker::test;
namespace fs = std::filesystem;

namespace {

int raw_connect(const std::string& socket) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket.c_str(), sizeof(addr.sun_path) - 1);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

// True when the daemon closed `fd` within 60 s (after possibly sending an error).
// A guard against a hang, far above the handshake timeouts used here, not a figure to meet.
bool closed_by_peer(int fd) {
  ::timeval tv{60, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[1024];
  for (int i = 0; i < 4; ++i) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) return true;
    if (n < 0) return false;
  }
  return false;
}

}  // namespace

TEST_CASE("a consumer SIGKILLed while holding batches loses its leases - others keep flowing",
          "[fault]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec j;
  j.consumers = 2;
  j.prefetch = 2;
  Daemon d(write_config(dir.path(), {j}, 2), socket);

  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  if (child == 0) {
    // Hold every slot of rank 0, tell the parent, then wait to be killed.
    stoker::Client c("demo", 0, at(socket));
    stoker::Batch a = c.next(30000), b = c.next(30000);
    [[maybe_unused]] ssize_t w = ::write(ready[1], "x", 1);
    for (;;) ::pause();
  }
  char x;
  REQUIRE(::read(ready[0], &x, 1) == 1);

  stoker::Client other("demo", 1, at(socket));
  CHECK(other.next(30000).count() > 0);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);

  // Rank 0 can reconnect and gets batches again: its two slots were reclaimed.
  stoker::Client again("demo", 0, at(socket));
  stoker::Batch b1 = again.next(30000);
  stoker::Batch b2 = again.next(30000);
  CHECK(b1.count() > 0);
  CHECK(b2.count() > 0);
  CHECK(other.next(30000).count() > 0);
}

TEST_CASE("a daemon that dies makes a waiting consumer return an error, not hang", "[fault]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec j;
  j.prefetch = 2;
  const auto cfg = write_config(dir.path(), {j}, 1);
  auto d = std::make_unique<Daemon>(cfg, socket);
  stoker::Client c("demo", 0, at(socket));
  stoker::Batch a = c.next(30000), b = c.next(30000);  // ring full: the next call waits

  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    d->kill9();
  });
  try {
    c.next(-1);
    FAIL("next() returned a batch from a dead daemon");
  } catch (const stoker::Error& e) {
    CHECK(e.status() == STOKER_ERR_DISCONNECTED);
    CHECK_THAT(e.what(), Catch::Contains("closed the connection"));
  }
  killer.join();
  // next(-1) has no limit of its own: returning at all, with DISCONNECTED, is the proof that
  // the client noticed; a hang is ctest's timeout. No wall-clock figure: the machine may be
  // loaded.
  // Batches the consumer still holds stay readable (the mapping outlives the segment name).
  CHECK(a.count() == 8);
  CHECK(a.ids()[0] >= 0);

  // A restarted daemon serves again on the same socket.
  d = std::make_unique<Daemon>(cfg, socket);
  stoker::Client c2("demo", 0, at(socket));
  CHECK(c2.next(30000).count() == 8);
}

TEST_CASE("garbage from one client evicts that client only", "[fault]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec j;
  j.consumers = 2;
  Daemon d(write_config(dir.path(), {j}, 1), socket);
  stoker::Client good("demo", 1, at(socket));
  CHECK(good.next(30000).count() == 8);

  SECTION("random bytes") {
    const int fd = raw_connect(socket);
    const char junk[] = "GET / HTTP/1.1\r\n\r\n";
    ::send(fd, junk, sizeof junk, 0);
    CHECK(closed_by_peer(fd));
    ::close(fd);
  }
  SECTION("a header that lies about its size") {
    const int fd = raw_connect(socket);
    auto m = stoker::proto::make_message<stoker::proto::HelloMsg>(stoker::proto::MsgType::kHello);
    m.header.size = 100000;
    ::send(fd, &m, sizeof m, 0);
    CHECK(closed_by_peer(fd));
    ::close(fd);
  }
  SECTION("a job name without terminator and an absurd rank") {
    const int fd = raw_connect(socket);
    auto m = stoker::proto::make_message<stoker::proto::HelloMsg>(stoker::proto::MsgType::kHello);
    std::memset(m.job, 'A', sizeof m.job);
    m.rank = 0xffffffffu;
    ::send(fd, &m, sizeof m, 0);
    CHECK(closed_by_peer(fd));
    ::close(fd);
  }
  SECTION("a release of a slot it does not hold") {
    const int fd = raw_connect(socket);
    auto h = stoker::proto::make_message<stoker::proto::HelloMsg>(stoker::proto::MsgType::kHello);
    stoker::proto::copy_cstr(h.job, "demo");
    h.rank = 0;
    ::send(fd, &h, sizeof h, 0);
    stoker::proto::WelcomeMsg w{};
    REQUIRE(::recv(fd, &w, sizeof w, 0) == static_cast<ssize_t>(sizeof w));
    auto r = stoker::proto::make_message<stoker::proto::ReleaseMsg>(stoker::proto::MsgType::kRelease);
    r.slot = 1;
    r.generation = 12345;
    ::send(fd, &r, sizeof r, 0);
    CHECK(closed_by_peer(fd));
    ::close(fd);
    // Rank 0 is free again for a well-behaved consumer.
    stoker::Client c0("demo", 0, at(socket));
    CHECK(c0.next(30000).count() == 8);
  }
  SECTION("a credit without announce mode, and an acquire in announce mode (protocol 2.5)") {
    for (const bool announce : {false, true}) {
      const int fd = raw_connect(socket);
      auto h = stoker::proto::make_message<stoker::proto::HelloMsg>(stoker::proto::MsgType::kHello);
      stoker::proto::copy_cstr(h.job, "demo");
      h.flags = announce ? stoker::proto::kHelloAnnounce : 0;
      h.window = 2;
      ::send(fd, &h, sizeof h, 0);
      stoker::proto::WelcomeMsg w{};
      REQUIRE(::recv(fd, &w, sizeof w, 0) == static_cast<ssize_t>(sizeof w));
      if (announce) {
        auto a = stoker::proto::make_message<stoker::proto::AcquireMsg>(stoker::proto::MsgType::kAcquire);
        ::send(fd, &a, sizeof a, 0);
      } else {
        auto c = stoker::proto::make_message<stoker::proto::CreditMsg>(stoker::proto::MsgType::kCredit);
        c.taken = 1;
        ::send(fd, &c, sizeof c, 0);
      }
      CHECK(closed_by_peer(fd));
      ::close(fd);
    }
  }
  SECTION("a credit past what was announced is clamped: the window keeps flowing") {
    const int fd = raw_connect(socket);
    auto h = stoker::proto::make_message<stoker::proto::HelloMsg>(stoker::proto::MsgType::kHello);
    stoker::proto::copy_cstr(h.job, "demo");
    h.flags = stoker::proto::kHelloAnnounce;
    h.window = 2;
    ::send(fd, &h, sizeof h, 0);
    stoker::proto::WelcomeMsg w{};
    REQUIRE(::recv(fd, &w, sizeof w, 0) == static_cast<ssize_t>(sizeof w));
    ::timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    auto take = [&] {
      stoker::proto::BatchMsg b{};
      REQUIRE(::recv(fd, &b, sizeof b, 0) == static_cast<ssize_t>(sizeof b));
      REQUIRE(b.header.type == static_cast<std::uint16_t>(stoker::proto::MsgType::kBatch));
      return b;
    };
    // Claims to have taken far more than it was sent, and holds the two it got.
    const stoker::proto::BatchMsg b0 = take(), b1 = take();
    CHECK(b1.batch_index == b0.batch_index + 1);
    auto c = stoker::proto::make_message<stoker::proto::CreditMsg>(stoker::proto::MsgType::kCredit);
    c.taken = ~std::uint64_t{0} - 1;
    ::send(fd, &c, sizeof c, 0);
    // Clamped to the 2 announced: the window has room for the ring's third slot at most.
    const stoker::proto::BatchMsg b2 = take();
    CHECK(b2.batch_index == b1.batch_index + 1);
    for (const auto& b : {b0, b1, b2}) {
      auto r = stoker::proto::make_message<stoker::proto::ReleaseMsg>(stoker::proto::MsgType::kRelease);
      r.slot = b.slot;
      r.generation = b.generation;
      ::send(fd, &r, sizeof r, 0);
    }
    // Releases keep the stream going (an unclamped count would have wedged the window shut).
    CHECK(take().batch_index == b2.batch_index + 1);
    ::close(fd);
  }
  SECTION("an acquire before hello") {
    const int fd = raw_connect(socket);
    auto a = stoker::proto::make_message<stoker::proto::AcquireMsg>(stoker::proto::MsgType::kAcquire);
    ::send(fd, &a, sizeof a, 0);
    CHECK(closed_by_peer(fd));
    ::close(fd);
  }
  // The well-behaved consumer never noticed.
  CHECK(good.next(30000).count() == 8);
}

namespace {

// A dataset with 2 classes of good photos plus broken files made from them.
fs::path make_broken_dataset(const fs::path& dir, int& good, std::vector<std::string>& bad_paths) {
  const fs::path root = dir / "data";
  fs::create_directories(root / "a");
  fs::create_directories(root / "b");
  good = 0;
  for (const auto& e : fs::directory_iterator(data_dir() + "/demo/flower")) {
    fs::copy_file(e.path(), root / "a" / e.path().filename());
    ++good;
  }
  for (const auto& e : fs::directory_iterator(data_dir() + "/demo/insect")) {
    fs::copy_file(e.path(), root / "b" / e.path().filename());
    ++good;
  }
  const auto src = data_dir() + "/demo/flower/flower_00.jpg";
  std::ifstream in(src, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto write = [&](const fs::path& p, const std::string& content) {
    std::ofstream(p, std::ios::binary) << content;
    bad_paths.push_back(p.string());
  };
  write(root / "a" / "truncated.jpg", bytes.substr(0, bytes.size() / 3));
  write(root / "a" / "empty.jpg", "");
  write(root / "b" / "text.jpg", "this is not an image\n");
  return root;
}

}  // namespace

TEST_CASE("broken images are skipped, counted, quarantined, and every good one arrives once",
          "[fault]") {
  TempDir dir;
  int good = 0;
  std::vector<std::string> bad;
  JobSpec j;
  j.root = make_broken_dataset(dir.path(), good, bad).string();
  j.batch_size = 5;
  const auto socket = (dir.path() / "s.sock").string();
  const auto cfg = write_config(dir.path(), {j}, 2);
  {
    Daemon d(cfg, socket);
    stoker::Client c("demo", 0, at(socket));
    std::multiset<std::int64_t> ids;
    std::size_t batches = 0;
    for (;;) {
      stoker::Batch b = c.next(30000);
      ++batches;
      for (std::uint32_t i = 0; i < b.count(); ++i) ids.insert(b.ids()[i]);
      if (b.last_in_epoch()) break;
    }
    CHECK(ids.size() == static_cast<std::size_t>(good));
    std::set<std::int64_t> unique(ids.begin(), ids.end());
    CHECK(unique.size() == ids.size());
    std::string out;
    REQUIRE(run_program({bin("stokerctl"), "status", "--socket", socket}, out) == 0);
    CHECK_THAT(out, Catch::Contains("\"quarantined\":3"));
    const std::string log = d.log();
    for (const auto& p : bad) {
      CHECK_THAT(log, Catch::Contains(p));
    }
    CHECK(d.stop() == 0);
  }
  // The quarantine file lists them; the next start skips them without decoding.
  const auto qfiles = quarantine_files(dir.path(), "demo");
  REQUIRE(qfiles.size() == 1);
  std::ifstream q(qfiles[0]);
  std::string text((std::istreambuf_iterator<char>(q)), std::istreambuf_iterator<char>());
  for (const auto& p : bad) CHECK_THAT(text, Catch::Contains(p));
  Daemon d2(cfg, socket);
  CHECK_THAT(d2.log(), Catch::Contains("3 file(s) skipped"));
  stoker::Client c("demo", 0, at(socket));
  std::size_t n = 0;
  for (;;) {
    stoker::Batch b = c.next(30000);
    n += b.count();
    if (b.last_in_epoch()) break;
  }
  CHECK(n == static_cast<std::size_t>(good));
}

TEST_CASE("on_error: fail stops the job and tells the consumer which file", "[fault]") {
  TempDir dir;
  int good = 0;
  std::vector<std::string> bad;
  JobSpec j;
  j.root = make_broken_dataset(dir.path(), good, bad).string();
  j.on_error = "fail";
  j.batch_size = 4;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {j}, 2), socket);
  try {
    // The job may stop before or after the handshake: either way the consumer is told.
    stoker::Client c("demo", 0, at(socket));
    for (int i = 0; i < 100; ++i) c.next(30000);
    FAIL("the job did not stop");
  } catch (const stoker::Error& e) {
    CHECK(e.status() == STOKER_ERR_JOB_FAILED);
    CHECK_THAT(e.what(), Catch::Contains(dir.path().string()) && Catch::Contains("stopped"));
  }
}

TEST_CASE("on_error: substitute keeps batches full with a good sample's image and label",
          "[fault]") {
  TempDir dir;
  int good = 0;
  std::vector<std::string> bad;
  JobSpec j;
  j.root = make_broken_dataset(dir.path(), good, bad).string();
  j.on_error = "substitute";
  j.batch_size = 5;
  j.shuffle = false;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {j}, 2), socket);
  stoker::Client c("demo", 0, at(socket));
  const std::size_t total = static_cast<std::size_t>(good) + bad.size();  // 35
  std::size_t delivered = 0;
  std::set<std::int64_t> bad_ids_seen;
  for (;;) {
    stoker::Batch b = c.next(30000);
    delivered += b.count();
    if (!b.last_in_epoch()) CHECK(b.count() == 5);  // full batches
    for (std::uint32_t i = 0; i < b.count(); ++i) {
      // Every delivered (image, label, id) belongs to a good file: ids of the bad files
      // (a/empty.jpg = 0, a/truncated.jpg = 17, b/text.jpg = 34 in sorted order) never appear.
      bad_ids_seen.insert(b.ids()[i]);
      CHECK(b.labels()[i] == (b.ids()[i] < 18 ? 0 : 1));
    }
    if (b.last_in_epoch()) break;
  }
  CHECK(delivered == total);
  CHECK(bad_ids_seen.count(0) == 0);
  CHECK(bad_ids_seen.count(17) == 0);
  CHECK(bad_ids_seen.count(34) == 0);
  std::string out;
  REQUIRE(run_program({bin("stokerctl"), "status", "--socket", socket}, out) == 0);
  // Each bad file is substituted where it was met; later epochs no longer plan it (the
  // ring may have planned the next epoch before the last bad file was found: 3 or 4).
  CHECK_THAT(out, Catch::Contains("\"quarantined\":3"));
  CHECK((out.find("\"substituted\":3") != std::string::npos ||
         out.find("\"substituted\":4") != std::string::npos));
}

TEST_CASE("a file that vanished after the scan is counted and skipped this epoch, not quarantined", "[fault]") {
  TempDir dir;
  int good = 0;
  std::vector<std::string> bad;
  JobSpec j;
  j.root = make_broken_dataset(dir.path(), good, bad).string();
  j.batch_size = 5;
  j.prefetch = 1;
  j.shuffle = false;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {j}, 1), socket);
  // The last insect photo (id 33) is planned only after the first batches are consumed.
  const fs::path victim = fs::path(j.root) / "b" / "insect_15.jpg";
  REQUIRE(fs::remove(victim));
  stoker::Client c("demo", 0, at(socket));
  std::set<std::int64_t> ids;
  for (;;) {
    stoker::Batch b = c.next(30000);
    for (std::uint32_t i = 0; i < b.count(); ++i) ids.insert(b.ids()[i]);
    if (b.last_in_epoch()) break;
  }
  CHECK(ids.size() == static_cast<std::size_t>(good - 1));
  CHECK(ids.count(33) == 0);
  std::string out;
  REQUIRE(run_program({bin("stokerctl"), "status", "--socket", socket}, out) == 0);
  CHECK_THAT(out, Catch::Contains("\"io\":1") && Catch::Contains("\"missing\":1") &&
                      Catch::Contains("\"quarantined\":3"));  // the 3 broken files only
  CHECK_THAT(d.log(), Catch::Contains(victim.string()) && Catch::Contains("cannot open"));
}

TEST_CASE("a connection that never says anything is closed - consumers keep flowing", "[fault]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {JobSpec{}}, 1, "  handshake_timeout_s: 0.5\n"), socket);
  const auto t0 = std::chrono::steady_clock::now();
  const int silent = raw_connect(socket);
  stoker::Client c("demo", 0, at(socket));
  CHECK(closed_by_peer(silent));
  // Closed by the handshake timeout, not sooner (the daemon's clock starts after our connect).
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(500));
  ::close(silent);
  // A consumer that is quiet between batches is not a silent connection.
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  CHECK(c.next(30000).count() == 8);
  CHECK_THAT(d.log(), Catch::Contains("sent nothing"));
}
