// Environment variables for the processes a test starts in its scope (a daemon with a
// preloaded shim), restored on destruction so later programs (stokerctl) run without them.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace stoker::test {

class ScopedEnvironment {
 public:
  ScopedEnvironment() = default;
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;
  ~ScopedEnvironment() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) {
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      } else {
        ::unsetenv(it->first.c_str());
      }
    }
  }
  void set(const std::string& key, const std::string& value) {
    const char* old = std::getenv(key.c_str());
    saved_.emplace_back(key, old ? std::optional<std::string>(old) : std::nullopt);
    ::setenv(key.c_str(), value.c_str(), 1);
  }
  // LD_PRELOAD `lib` into what starts next; a sanitized stokerd accepts a preload only with
  // verify_asan_link_order=0.
  void preload(const std::string& lib) {
    set("LD_PRELOAD", lib);
    const char* asan = std::getenv("ASAN_OPTIONS");
    set("ASAN_OPTIONS", std::string(asan ? asan : "") + ":verify_asan_link_order=0");
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace stoker::test
