// Files found bad are listed, one per line ("path<TAB>kind<TAB>reason"), in a quarantine
// file that the next start reads so it does not decode them again. Appends are flushed line
// by line so a killed daemon loses nothing already reported.
#pragma once

#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <unordered_set>

namespace stoker::server {

class Quarantine {
 public:
  // Reads the existing list if the file exists; a missing file is an empty list.
  explicit Quarantine(std::filesystem::path file);
  ~Quarantine();
  Quarantine(const Quarantine&) = delete;
  Quarantine& operator=(const Quarantine&) = delete;

  bool contains(const std::string& path) const;
  // Returns false if the path was already listed (so the caller logs each file once).
  bool add(const std::string& path, const char* kind, const std::string& reason);
  std::size_t size() const;
  const std::filesystem::path& file() const { return file_; }

 private:
  std::filesystem::path file_;
  mutable std::mutex mu_;
  std::unordered_set<std::string> paths_;  // guarded by mu_
  std::FILE* out_ = nullptr;               // guarded by mu_; opened on first add
};

}  // namespace stoker::server
