// A fresh folder under $TMPDIR (or /tmp) for one test, removed with everything in it at the
// end. Header-only, so that tests linking no fixture (the unit tests of base/, store/) use it
// too. `mode`: 0700 by default; the tests that act as another uid open it to 0755.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

namespace stoker::test {

class TempDir {
 public:
  explicit TempDir(mode_t mode = 0700) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "stoker-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
    if (mode != 0700) ::chmod(tmpl.c_str(), mode);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace stoker::test
