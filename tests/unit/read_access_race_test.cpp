// Issue #34, D2: a client-defined job's read (source::open_checked) against a folder swapped for
// a symlink to a root-only folder while it reads. The old open_checked stat()ed the path, then
// opened it by name: the swap in between made root stokerd open a root-only FIFO (waking its
// writer). Now the permission is decided on the descriptors of the walk and of the file, and
// only a regular file is ever opened to read.
#include <catch2/catch.hpp>

#include "temp_dir.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>

#include "source/read_access.hpp"

namespace fs = std::filesystem;
using stoker::source::ReadAs;

using stoker::test::TempDir;

namespace {

int exchange(const fs::path& a, const fs::path& b) {
  return static_cast<int>(::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE));
}

}  // namespace

TEST_CASE("read access: a folder swapped for a symlink to a root-only folder never yields its bytes nor opens "
          "its FIFO (10 s)",
          "[unit][client-jobs][race]") {
  if (::geteuid() != 0) {
    WARN("not root: the outside folder cannot be another user's here");
    return;
  }
  TempDir s(0755);
  // pub/d: the user's folder (what the job names); secret/: root's, mode 0700.
  fs::create_directories(s.path() / "pub/d");
  fs::create_directories(s.path() / "secret");
  ::chmod((s.path() / "pub").c_str(), 0755);
  ::chmod((s.path() / "pub/d").c_str(), 0755);
  ::chmod((s.path() / "secret").c_str(), 0700);
  std::ofstream(s.path() / "pub/d/a.jpg") << "INSIDE";
  std::ofstream(s.path() / "pub/d/f.jpg") << "INSIDE";
  ::chmod((s.path() / "pub/d/a.jpg").c_str(), 0644);
  ::chmod((s.path() / "pub/d/f.jpg").c_str(), 0644);
  std::ofstream(s.path() / "secret/a.jpg") << "OUTSIDE";
  ::chmod((s.path() / "secret/a.jpg").c_str(), 0644);  // readable by mode: only its folder protects it
  REQUIRE(::mkfifo((s.path() / "secret/f.jpg").c_str(), 0644) == 0);
  fs::create_symlink(s.path() / "secret", s.path() / "pub/swap");  // exchanged with pub/d in a loop

  const ReadAs user{1000, 1000, {1000}};
  std::atomic<bool> stop{false};
  std::atomic<long> swaps{0}, fifo_opened{0};
  std::thread swapper([&] {
    while (!stop) {
      if (exchange(s.path() / "pub/d", s.path() / "pub/swap") == 0) ++swaps;
    }
  });
  // A writer waiting on the root-only FIFO: it wakes only if someone opens it to read.
  std::thread writer([&] {
    while (!stop) {
      const int fd = ::open((s.path() / "secret/f.jpg").c_str(), O_WRONLY);
      if (fd >= 0) {
        if (!stop) ++fifo_opened;
        ::close(fd);
      }
    }
  });

  long ok = 0, refused = 0, outside = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < end) {
    for (const char* name : {"a.jpg", "f.jpg"}) {
      const stoker::base::Result<int> fd = stoker::source::open_checked((s.path() / "pub/d" / name).string(), user, false);
      if (!fd) {
        ++refused;
        continue;
      }
      char buf[64];
      const ssize_t n = ::read(*fd, buf, sizeof buf);
      ::close(*fd);
      const std::string bytes(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
      if (bytes == "INSIDE") {
        ++ok;
      } else {
        ++outside;
      }
    }
  }
  stop = true;
  swapper.join();
  {
    const int release = ::open((s.path() / "secret/f.jpg").c_str(), O_RDONLY | O_NONBLOCK);  // frees the writer
    writer.join();
    if (release >= 0) ::close(release);
  }
  INFO("swaps " << swaps << ", reads ok " << ok << ", refused " << refused);
  CHECK(swaps > 100);
  CHECK(ok > 0);
  CHECK(outside == 0);
  CHECK(fifo_opened == 0);
}
