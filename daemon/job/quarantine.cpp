#include "job/quarantine.hpp"

#include <fstream>
#include <sys/stat.h>
#include <vector>

#include "log/log.hpp"

namespace stoker::job {

std::string escape_field(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

std::string unescape_field(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    const char next = text[i + 1];
    if (next == '\\' || next == 'n' || next == 't') {
      out += next == 'n' ? '\n' : next == 't' ? '\t' : '\\';
      ++i;
    } else if (next == 'x' && i + 3 < text.size() && hex(text[i + 2]) >= 0 && hex(text[i + 3]) >= 0) {
      out += static_cast<char>(hex(text[i + 2]) * 16 + hex(text[i + 3]));
      i += 3;
    } else {
      out += text[i];  // not a sequence escape_field writes (an older file's literal backslash)
    }
  }
  return out;
}

Quarantine::Quarantine(std::filesystem::path file) : file_(std::move(file)) {
  std::ifstream in(file_);
  std::string line;
  while (std::getline(in, line)) {
    // path, kind, reason[, size, mtime_ns]
    std::vector<std::string> f;
    for (std::size_t at = 0;;) {
      const auto tab = line.find('\t', at);
      f.push_back(line.substr(at, tab == std::string::npos ? std::string::npos : tab - at));
      if (tab == std::string::npos) break;
      at = tab + 1;
    }
    if (f[0].empty()) continue;
    paths_[unescape_field(f[0])] = f.size() >= 5 ? f[3] + ":" + f[4] : std::string();
  }
}

Quarantine::~Quarantine() {
  if (out_ != nullptr) std::fclose(out_);
}

namespace {

// "size:mtime_ns" of a file now, or "" when it cannot be read. A tar member is named
// "SHARD:MEMBER" and has no stat of its own: it takes its shard's, found as the shortest
// prefix before a ':' that is a regular file, so a rewritten shard's members are tried again.
std::string fingerprint(const std::string& path) {
  struct stat st {};
  bool found = ::stat(path.c_str(), &st) == 0;
  for (std::size_t colon = path.find(':'); !found && colon != std::string::npos; colon = path.find(':', colon + 1)) {
    found = ::stat(path.substr(0, colon).c_str(), &st) == 0 && S_ISREG(st.st_mode);
  }
  if (!found) return {};
  return std::to_string(st.st_size) + ":" +
         std::to_string(static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec);
}

}  // namespace

bool Quarantine::contains(const std::string& path) const {
  base::MutexLock lock(mu_);
  return paths_.count(path) != 0;
}

bool Quarantine::still_bad(const std::string& path) const {
  std::string recorded;
  {
    base::MutexLock lock(mu_);
    auto it = paths_.find(path);
    if (it == paths_.end()) return false;
    recorded = it->second;
  }
  return recorded.empty() || recorded == fingerprint(path);
}

std::size_t Quarantine::size() const {
  base::MutexLock lock(mu_);
  return paths_.size();
}

bool Quarantine::add(const std::string& path, const char* kind, const std::string& reason) {
  base::MutexLock lock(mu_);
  const std::string fp = fingerprint(path);
  if (auto it = paths_.find(path); it != paths_.end() && (it->second.empty() || it->second == fp)) return false;
  paths_[path] = fp;
  if (out_ == nullptr) {
    std::error_code ec;
    if (file_.has_parent_path()) std::filesystem::create_directories(file_.parent_path(), ec);
    out_ = std::fopen(file_.c_str(), "a");
    if (out_ == nullptr) {
      stoker::log::warn("cannot append to quarantine file {}; bad files will be retried next start", file_.string());
      return true;
    }
  }
  // Escaped, so that a name or a reason holding a newline, a tab or another control character
  // (anyone who can create a file in the dataset chooses its name) stays one line of five
  // fields: no line of this file is ever written by a file name.
  const auto colon = fp.find(':');
  std::fprintf(out_, "%s\t%s\t%s\t%s\t%s\n", escape_field(path).c_str(), kind, escape_field(reason).c_str(),
               colon == std::string::npos ? "" : fp.substr(0, colon).c_str(),
               colon == std::string::npos ? "" : fp.substr(colon + 1).c_str());
  std::fflush(out_);
  return true;
}

}  // namespace stoker::job
