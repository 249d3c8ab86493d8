// The tar index cache: what indexing a shard found, kept beside the quarantine so that a
// restart with unchanged shards reads no tar header. Text, one record per line, so a person
// can look at it; the path is last on its line because it may hold spaces. Member names with
// a newline never get here (refused as unsafe when indexing).
//
//   stoker-tar-index 1
//   shard SIZE MTIME_NS ENTRIES SKIPLINES PATH
//   skip KIND COUNT FIRST-MEMBER        (SKIPLINES of them)
//   OFFSET SIZE LABEL MEMBER             (ENTRIES of them)
//
// Anything unexpected makes the whole file count as absent: the cost is one re-index.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "source/tar_shards.hpp"

namespace stoker::source::tar {
namespace {

constexpr const char* kMagic = "stoker-tar-index 1";

// Splits off `n` space-separated integers from the front of `line`; the rest is the tail.
template <typename T>
bool take(std::string_view& line, T& v) {
  const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), v);
  if (ec != std::errc() || end == line.data() + line.size() || *end != ' ') return false;
  line.remove_prefix(static_cast<std::size_t>(end - line.data()) + 1);
  return true;
}

bool take_word(std::string_view& line, std::string_view word) {
  if (line.substr(0, word.size()) != word || line.size() <= word.size() || line[word.size()] != ' ') return false;
  line.remove_prefix(word.size() + 1);
  return true;
}

}  // namespace

std::map<std::string, ShardIndex> load_index_cache(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return {};
  return parse_index(in);
}

std::map<std::string, ShardIndex> parse_index(std::istream& in) {
  std::map<std::string, ShardIndex> out;
  std::string text;
  if (!std::getline(in, text) || text != kMagic) return {};
  while (std::getline(in, text)) {
    std::string_view line = text;
    ShardIndex ix;
    std::size_t entries = 0, skip_lines = 0;
    if (!take_word(line, "shard") || !take(line, ix.file_size) || !take(line, ix.mtime_ns) || !take(line, entries) ||
        !take(line, skip_lines) || line.empty() || skip_lines > kSkipKinds) {
      return {};
    }
    const std::string path(line);
    for (std::size_t i = 0; i < skip_lines; ++i) {
      if (!std::getline(in, text)) return {};
      std::string_view l = text;
      std::size_t kind = 0;
      std::uint64_t count = 0;
      if (!take_word(l, "skip") || !take(l, kind) || !take(l, count) || kind >= kSkipKinds) return {};
      ix.skipped[kind] = count;
      ix.first_skipped[kind] = std::string(l);
    }
    // A count as written, not yet backed by lines: reserved only up to what a sane file holds
    // before its lines are read (a scribbled count must not ask for 2^60 entries at once).
    ix.entries.reserve(std::min<std::size_t>(entries, std::size_t{1} << 16));
    for (std::size_t i = 0; i < entries; ++i) {
      if (!std::getline(in, text)) return {};
      std::string_view l = text;
      Entry e;
      if (!take(l, e.offset) || !take(l, e.size) || !take(l, e.label) || l.empty() || e.label < -1) return {};
      // Bounds are checked again here: a cache edited by hand must not send a read past the
      // shard's end (the read would fail cleanly anyway, but as a transient error).
      if (e.size > ix.file_size || e.offset > ix.file_size - e.size) return {};
      ix.add(l, e.offset, e.size, e.label);
    }
    out[path] = std::move(ix);
  }
  return out;
}

std::string format_index(const std::vector<std::string>& shards, const std::vector<const ShardIndex*>& indexes) {
  std::ostringstream out;
  out << kMagic << "\n";
  for (std::size_t i = 0; i < shards.size(); ++i) {
    if (shards[i].find('\n') != std::string::npos) continue;  // cannot be written as a line; indexed each start
    const ShardIndex& ix = *indexes[i];
    std::size_t skip_lines = 0;
    for (auto n : ix.skipped) skip_lines += n != 0 ? 1 : 0;
    out << "shard " << ix.file_size << ' ' << ix.mtime_ns << ' ' << ix.entries.size() << ' ' << skip_lines << ' '
        << shards[i] << '\n';
    for (std::size_t k = 0; k < kSkipKinds; ++k) {
      if (ix.skipped[k] != 0) out << "skip " << k << ' ' << ix.skipped[k] << ' ' << ix.first_skipped[k] << '\n';
    }
    for (const auto& e : ix.entries) out << e.offset << ' ' << e.size << ' ' << e.label << ' ' << ix.member(e) << '\n';
  }
  return std::move(out).str();
}

std::string write_new_file(const std::filesystem::path& file, const std::string& text) {
  // Created anew (O_EXCL: never an existing file, nor one a symlink planted at the temporary
  // name points to; O_NOFOLLOW), then renamed over `file`: a reader never sees half of it.
  const std::filesystem::path tmp = file.string() + ".tmp." + std::to_string(::getpid());
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(tmp.c_str(), kFlags, 0644);
  if (fd < 0 && errno == EEXIST) {
    // Left by an earlier process of this pid that died while writing: the name is removed
    // (a symlink there is removed, not followed) and created anew.
    (void)::unlink(tmp.c_str());
    fd = ::open(tmp.c_str(), kFlags, 0644);
  }
  if (fd < 0) return "cannot create " + tmp.string() + ": " + std::strerror(errno);
  std::size_t at = 0;
  while (at < text.size()) {
    const ssize_t k = ::write(fd, text.data() + at, text.size() - at);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    at += static_cast<std::size_t>(k);
  }
  const int saved = errno;
  ::close(fd);
  std::error_code ec;
  if (at != text.size()) {
    std::filesystem::remove(tmp, ec);
    return "cannot write " + tmp.string() + ": " + std::strerror(saved);
  }
  std::filesystem::rename(tmp, file, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return "cannot rename to " + file.string() + ": " + ec.message();
  }
  return {};
}

std::string save_index_cache(const std::filesystem::path& file, const std::vector<std::string>& shards,
                             const std::vector<const ShardIndex*>& indexes) {
  std::error_code ec;
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), ec);
  return write_new_file(file, format_index(shards, indexes));
}

}  // namespace stoker::source::tar
