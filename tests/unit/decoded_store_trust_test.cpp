// Issue #34, B1/B2: the decoded store's file was opened following symlinks, any file at its
// name was truncated when it was not a store, and neither the file's nor the folder's owner and
// mode were looked at. Now: created O_EXCL | O_NOFOLLOW mode 0600 in a folder of the daemon's
// user that no one else may write; an existing file must be a regular file of that user,
// writable by it alone — else refused naming it, never truncated, never used.
#include <catch2/catch.hpp>

#include "temp_dir.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "store/decoded_store.hpp"

namespace fs = std::filesystem;
using stoker::store::DecodedStore;

using stoker::test::TempDir;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::string refusal(const fs::path& dir) {
  try {
    auto s = DecodedStore::open(dir, 7, 320, 1 << 20);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("decoded store: a new file is created 0600 in a folder of the daemon's own", "[decoded_store][trust]") {
  TempDir s;
  const fs::path dir = s.path() / "store";
  auto st = DecodedStore::open(dir, 7, 320, 1 << 20);
  struct stat f {}, d {};
  REQUIRE(::stat(st->file().c_str(), &f) == 0);
  REQUIRE(::stat(dir.c_str(), &d) == 0);
  CHECK((f.st_mode & 07777) == 0600);
  CHECK(f.st_uid == ::geteuid());
  CHECK((d.st_mode & 07777) == 0700);
  st.reset();
  CHECK(DecodedStore::open(dir, 7, 320, 1 << 20) != nullptr);  // reopened: its own file
}

TEST_CASE("decoded store: a symlink, a foreign or widened file, a non-store file is refused, never truncated",
          "[decoded_store][trust]") {
  TempDir s;
  const fs::path dir = s.path() / "store";
  fs::create_directories(dir);
  ::chmod(dir.c_str(), 0700);
  const fs::path file = dir / DecodedStore::file_name(7, 320);
  const fs::path victim = s.path() / "victim.txt";
  std::ofstream(victim) << "precious";

  SECTION("a symlink at the store's name") {
    fs::create_symlink(victim, file);
    CHECK_THAT(refusal(dir), Catch::Contains(file.string()) && Catch::Contains("a symlink"));
    CHECK(slurp(victim) == "precious");
  }
  SECTION("a file that is not a store") {
    std::ofstream(file) << "not a store";
    ::chmod(file.c_str(), 0600);
    CHECK_THAT(refusal(dir), Catch::Contains("is not a store file"));
    CHECK(slurp(file) == "not a store");
  }
  SECTION("a file others may write") {
    std::ofstream(file) << "";
    ::chmod(file.c_str(), 0622);
    CHECK_THAT(refusal(dir), Catch::Contains("mode 0622"));
  }
  SECTION("a hard link to another file") {
    ::chmod(victim.c_str(), 0600);
    REQUIRE(::link(victim.c_str(), file.c_str()) == 0);
    CHECK_THAT(refusal(dir), Catch::Contains("2 link(s)"));
    CHECK(slurp(victim) == "precious");
  }
  SECTION("a file of another user") {
    if (::geteuid() != 0) return;
    std::ofstream(file) << "";
    ::chmod(file.c_str(), 0600);
    REQUIRE(::chown(file.c_str(), 1000, 1000) == 0);
    CHECK_THAT(refusal(dir), Catch::Contains("owned by uid 1000"));
  }
  SECTION("a FIFO") {
    REQUIRE(::mkfifo(file.c_str(), 0600) == 0);
    CHECK_THAT(refusal(dir), Catch::Contains("not a regular file"));
  }
}

TEST_CASE("decoded store: a folder others may write, or of another user, is refused naming owner and mode",
          "[decoded_store][trust]") {
  TempDir s;
  const fs::path dir = s.path() / "store";
  fs::create_directories(dir);
  ::chmod(dir.c_str(), 0777);
  CHECK_THAT(refusal(dir), Catch::Contains(dir.string()) && Catch::Contains("mode 0777") &&
                               Catch::Contains("owned by uid " + std::to_string(::geteuid())));
  CHECK_FALSE(fs::exists(dir / DecodedStore::file_name(7, 320)));  // nothing created there
  ::chmod(dir.c_str(), 0755);
  if (::geteuid() == 0) {
    REQUIRE(::chown(dir.c_str(), 1000, 1000) == 0);
    CHECK_THAT(refusal(dir), Catch::Contains("owned by uid 1000"));
  }
}
