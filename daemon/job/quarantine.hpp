// Files found bad are listed, one per line ("path<TAB>kind<TAB>reason<TAB>size<TAB>mtime_ns",
// path and reason escaped by escape_field: a backslash, newline, tab or other control
// character in a name never splits or adds a line),
// in a quarantine file that the next start reads so it does not decode them again. Appends
// are flushed line by line so a killed daemon loses nothing already reported.
//
// An entry holds only while the file is the one that was found bad: a file replaced since
// (another size or modification time) is tried again. The default file is keyed by the
// dataset's identity (job name + a hash of the source root), so a job pointed at another
// dataset starts with its own list.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/mutex.hpp"

namespace stoker::job {

// A quarantine field as written: a backslash is doubled, a newline becomes backslash-n, a tab
// backslash-t, any other control character (< 0x20, 0x7f) backslash-xHH; everything else
// (UTF-8 included) stays as it is.
std::string escape_field(std::string_view text);
// The inverse; a backslash starting no such sequence (an older file's) is kept as it is.
std::string unescape_field(std::string_view text);

class Quarantine {
 public:
  // Reads the existing list if the file exists; a missing file is an empty list.
  explicit Quarantine(std::filesystem::path file);
  ~Quarantine();
  Quarantine(const Quarantine&) = delete;
  Quarantine& operator=(const Quarantine&) = delete;

  bool contains(const std::string& path) const;
  // Listed, and still the same file (size and mtime as when it was found bad; an entry of
  // the older format without them matches by path alone).
  bool still_bad(const std::string& path) const;
  // Returns false if the path was already listed (so the caller logs each file once).
  bool add(const std::string& path, const char* kind, const std::string& reason);
  std::size_t size() const;
  const std::filesystem::path& file() const { return file_; }

 private:
  std::filesystem::path file_;
  mutable base::Mutex mu_;
  std::unordered_map<std::string, std::string> paths_ STOKER_GUARDED_BY(mu_);  // path -> "size:mtime_ns" or ""
  std::FILE* out_ STOKER_GUARDED_BY(mu_) = nullptr;  // opened on first add
};

}  // namespace stoker::job
