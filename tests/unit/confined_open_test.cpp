// The one confined open (base/confined_open.hpp, issue #34): what a peer names is opened below a
// root descriptor, never outside it, never a FIFO/device/socket, one refusal text for all; both
// with the kernel's openat2 and with the component walk.
#include <catch2/catch.hpp>

#include "temp_dir.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <thread>
#include <vector>
#include <unistd.h>

#include "base/confined_open.hpp"

namespace fs = std::filesystem;
using stoker::base::confined_open;
using stoker::base::ConfinedOptions;
using stoker::base::kRefusal;
using stoker::base::Need;
using stoker::base::Scope;

using stoker::test::TempDir;

namespace {

std::string read_all(int fd) {
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  return out;
}

// "" and the bytes on success; the refusal text otherwise.
std::string open_read(int root, const std::string& rel, const ConfinedOptions& o = {}) {
  stoker::base::Result<int> fd = confined_open(root, rel, o);
  if (!fd) return "REFUSED:" + fd.status().message();
  const std::string bytes = o.directory ? std::string("DIR") : read_all(*fd);
  const int flags = ::fcntl(*fd, F_GETFL);
  CHECK((flags & O_NONBLOCK) != 0);
  CHECK((::fcntl(*fd, F_GETFD) & FD_CLOEXEC) != 0);
  ::close(*fd);
  return bytes;
}

const std::string kRefused = "REFUSED:" + std::string(kRefusal);

}  // namespace

TEST_CASE("confined open: below the root only, one refusal text, with openat2 and with the walk", "[unit][confined]") {
  const bool kernel = GENERATE(true, false);
  if (kernel && !stoker::base::have_openat2()) {
    WARN("this kernel has no openat2: the walk is what runs");
  }
  stoker::base::set_openat2_enabled(kernel);
  INFO((kernel ? "openat2" : "walk"));
  TempDir s(0755);
  fs::create_directories(s.path() / "root/sub");
  fs::create_directories(s.path() / "out");
  std::ofstream(s.path() / "root/a.txt") << "inside";
  std::ofstream(s.path() / "root/sub/b.txt") << "deeper";
  std::ofstream(s.path() / "out/secret.txt") << "OUTSIDE";
  fs::create_symlink("sub/b.txt", s.path() / "root/rel-link");
  fs::create_symlink(s.path() / "root/a.txt", s.path() / "root/abs-inner-link");
  fs::create_symlink(s.path() / "out/secret.txt", s.path() / "root/abs-out-link");
  fs::create_symlink("../out/secret.txt", s.path() / "root/rel-out-link");
  fs::create_symlink("../out", s.path() / "root/dir-out-link");
  fs::create_symlink("/proc/self/root" + (s.path() / "out/secret.txt").string(), s.path() / "root/magic");
  fs::create_symlink("loop2", s.path() / "root/loop1");
  fs::create_symlink("loop1", s.path() / "root/loop2");
  REQUIRE(::mkfifo((s.path() / "root/fifo").c_str(), 0644) == 0);
  fs::create_symlink("/dev/zero", s.path() / "root/dev-link");

  auto root = stoker::base::open_root((s.path() / "root").string());
  REQUIRE(root.ok());
  const int r = root->get();

  CHECK(open_read(r, "a.txt") == "inside");
  CHECK(open_read(r, "sub/b.txt") == "deeper");
  CHECK(open_read(r, "./sub/../sub/b.txt") == "deeper");
  CHECK(open_read(r, "rel-link") == "deeper");
  ConfinedOptions named;
  named.root_path = (s.path() / "root").string();
  CHECK(open_read(r, "abs-inner-link", named) == "inside");  // an absolute link naming the root
  CHECK(open_read(r, "abs-inner-link") == kRefused);          // without the root's name: refused

  // Everything a caller may not have gives the same text: missing, outside, not a file.
  const std::vector<std::string> refused_names = {
      "missing.txt", "../out/secret.txt", (s.path() / "out/secret.txt").string(), "abs-out-link", "rel-out-link",
      "dir-out-link/secret.txt", "magic", "loop1", "fifo", "dev-link", "sub", "a.txt/x", "sub/../../out/secret.txt"};
  for (const std::string& rel : refused_names) {
    INFO(rel);
    CHECK(open_read(r, rel) == kRefused);
    CHECK(open_read(r, rel, named) == kRefused);
  }
  ConfinedOptions dir;
  dir.directory = true;
  CHECK(open_read(r, "sub", dir) == "DIR");
  CHECK(open_read(r, "", dir) == "DIR");
  CHECK(open_read(r, "a.txt", dir) == kRefused);
  CHECK(open_read(r, "dir-out-link", dir) == kRefused);

  // In-root scope: "/" and ".." stop at the root, an absolute link resolves from it.
  ConfinedOptions in_root;
  in_root.scope = Scope::kInRoot;
  fs::create_symlink("/a.txt", s.path() / "root/chroot-link");
  CHECK(open_read(r, "/a.txt", in_root) == "inside");
  CHECK(open_read(r, "../../../a.txt", in_root) == "inside");
  CHECK(open_read(r, "chroot-link", in_root) == "inside");
  CHECK(open_read(r, "abs-out-link", in_root) == kRefused);  // names a path not under the root
  stoker::base::set_openat2_enabled(true);
}

TEST_CASE("confined open: a FIFO is never opened (a blocked writer stays blocked), a device neither",
          "[unit][confined]") {
  const bool kernel = GENERATE(true, false);
  stoker::base::set_openat2_enabled(kernel);
  TempDir s(0755);
  const fs::path fifo = s.path() / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::atomic<bool> writer_open{false};
  std::thread writer([&] {
    const int fd = ::open(fifo.c_str(), O_WRONLY);  // blocks until someone opens it to read
    writer_open = true;
    if (fd >= 0) ::close(fd);
  });
  auto root = stoker::base::open_root(s.path().string());
  REQUIRE(root.ok());
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(open_read(root->get(), "fifo") == kRefused);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));  // not waited on
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK_FALSE(writer_open.load());  // opening it to read would have woken the writer
  const int release = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  writer.join();
  if (release >= 0) ::close(release);

  auto dev = stoker::base::open_root("/dev");
  REQUIRE(dev.ok());
  CHECK(open_read(dev->get(), "null") == kRefused);
  CHECK(open_read(dev->get(), "zero") == kRefused);
  // A socket: O_PATH sees it, nothing connects or reads.
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string sp = (s.path() / "sock").string();
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", sp.c_str());
  REQUIRE(::bind(sock, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  CHECK(open_read(root->get(), "sock") == kRefused);
  ::close(sock);
  stoker::base::set_openat2_enabled(true);
}

TEST_CASE("confined open: a `may` check is asked on every folder passed and on the file, by descriptor",
          "[unit][confined]") {
  TempDir s(0755);
  fs::create_directories(s.path() / "a/b");
  std::ofstream(s.path() / "a/b/f.txt") << "x";
  fs::create_symlink("b", s.path() / "a/link");
  auto root = stoker::base::open_root(s.path().string());
  REQUIRE(root.ok());
  struct stat want_b {};
  REQUIRE(::stat((s.path() / "a/b").c_str(), &want_b) == 0);
  int passes = 0, reads = 0;
  ConfinedOptions o;
  o.may = [&](const struct stat& st, Need need) {
    if (need == Need::kPass) {
      ++passes;
      return true;
    }
    ++reads;
    return S_ISREG(st.st_mode);
  };
  CHECK(open_read(root->get(), "a/link/f.txt", o) == "x");
  CHECK(passes == 4);  // the root, a, a again (the link's text "b"), b
  CHECK(reads == 1);
  // Refusing b (by its inode, as fstat sees it) refuses everything below it, however reached.
  o.may = [&](const struct stat& st, Need) { return !(st.st_dev == want_b.st_dev && st.st_ino == want_b.st_ino); };
  CHECK(open_read(root->get(), "a/b/f.txt", o) == kRefused);
  CHECK(open_read(root->get(), "a/link/f.txt", o) == kRefused);
  CHECK(open_read(root->get(), "a/b/../b/f.txt", o) == kRefused);
}
