#include "objstore/object_cache.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace stoker::objstore {

namespace {

constexpr std::string_view kSuffix = ".obj";

std::string mode_octal(mode_t m) {
  char b[8];
  std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(m & 07777));
  return b;
}

// 128 bits of two FNV-1a passes with different seeds: a file name per key. A collision is
// caught by the key kept in the file's header.
std::string file_name(const std::string& key) {
  std::uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
  for (const char c : key) {
    a = (a ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    b = (b ^ static_cast<unsigned char>(c)) * 0x100000001b3ull + 0x9e3779b97f4a7c15ull;
  }
  char name[40];
  std::snprintf(name, sizeof name, "%016llx%016llx", static_cast<unsigned long long>(a), static_cast<unsigned long long>(b));
  return std::string(name) + std::string(kSuffix);
}

// The file's trust check, on what fstat says of the open descriptor.
bool ours(const struct stat& st) {
  return S_ISREG(st.st_mode) && st.st_uid == ::geteuid() && (st.st_mode & 077) == 0 && st.st_nlink == 1;
}

bool read_all(int fd, std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool write_all(int fd, const std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

}  // namespace

base::Result<std::shared_ptr<ObjectCache>> ObjectCache::open(const std::filesystem::path& dir, std::uint64_t capacity) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir.parent_path(), ec);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return base::Status::error("cache: cannot create " + dir.string() + ": " + std::strerror(errno));
    }
  }
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return base::Status::error("cache: cannot open the folder " + dir.string() + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    ::close(fd);
    return base::Status::error("cache: the folder " + dir.string() + " is owned by uid " + std::to_string(st.st_uid) +
                               " with mode " + mode_octal(st.st_mode) +
                               "; stokerd keeps a cache only in a folder of its own user (uid " +
                               std::to_string(::geteuid()) + ") that no one else may write (chmod go-w, chown)");
  }
  std::shared_ptr<ObjectCache> c(new ObjectCache(dir, fd, capacity));
  c->load_existing();
  return c;
}

ObjectCache::ObjectCache(std::filesystem::path dir, int dir_fd, std::uint64_t capacity)
    : dir_(std::move(dir)), dir_fd_(dir_fd), capacity_(capacity) {}

ObjectCache::~ObjectCache() { ::close(dir_fd_); }

// What an earlier run left: our files, oldest first at the back of the LRU; leftover
// temporary files removed; anything else (a foreign file, a symlink) left alone and unused.
void ObjectCache::load_existing() {
  const int fd = ::openat(dir_fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = fd < 0 ? nullptr : ::fdopendir(fd);
  if (d == nullptr) {
    if (fd >= 0) ::close(fd);
    return;
  }
  std::vector<std::pair<std::int64_t, std::pair<std::string, std::uint64_t>>> found;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    struct stat st {};
    if (::fstatat(dir_fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (name.find(".tmp-") != std::string::npos && S_ISREG(st.st_mode) && st.st_uid == ::geteuid()) {
      ::unlinkat(dir_fd_, name.c_str(), 0);
      continue;
    }
    if (name.size() <= kSuffix.size() || name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0 ||
        !ours(st)) {
      continue;
    }
    found.push_back({st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec, {name, static_cast<std::uint64_t>(st.st_size)}});
  }
  ::closedir(d);
  std::sort(found.begin(), found.end());
  base::MutexLock lock(mu_);
  for (auto& [mtime, f] : found) {
    lru_.push_front(f.first);
    entries_[f.first] = Entry{lru_.begin(), f.second};
    bytes_ += f.second;
  }
  while (bytes_ > capacity_ && !lru_.empty()) forget(lru_.back());
}

void ObjectCache::forget(const std::string& name) {
  const auto it = entries_.find(name);
  if (it == entries_.end()) return;
  ::unlinkat(dir_fd_, name.c_str(), 0);
  bytes_ -= it->second.size;
  lru_.erase(it->second.at);
  entries_.erase(it);
}

bool ObjectCache::get(const std::string& key, std::vector<std::uint8_t>& out) {
  const std::string name = file_name(key);
  {
    base::MutexLock lock(mu_);
    const auto it = entries_.find(name);
    if (it == entries_.end()) return false;
    lru_.splice(lru_.begin(), lru_, it->second.at);
  }
  const int fd = ::openat(dir_fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0 && ours(st) && st.st_size >= 8;
  std::uint64_t key_size = 0;
  ok = ok && read_all(fd, reinterpret_cast<std::uint8_t*>(&key_size), 8) &&
       key_size == key.size() && 8 + key_size <= static_cast<std::uint64_t>(st.st_size);
  std::string stored(ok ? key_size : 0, '\0');
  ok = ok && read_all(fd, reinterpret_cast<std::uint8_t*>(stored.data()), stored.size()) && stored == key;
  if (ok) {
    out.resize(static_cast<std::size_t>(st.st_size) - 8 - key_size);
    ok = read_all(fd, out.data(), out.size());
  }
  ::close(fd);
  return ok;
}

void ObjectCache::put(const std::string& key, const std::vector<std::uint8_t>& data) {
  const std::uint64_t size = 8 + key.size() + data.size();
  if (size > capacity_) return;
  const std::string name = file_name(key);
  std::string tmp;
  {
    base::MutexLock lock(mu_);
    if (entries_.count(name) != 0) return;  // another thread kept it meanwhile
    while (bytes_ + size > capacity_ && !lru_.empty()) forget(lru_.back());
    tmp = name + ".tmp-" + std::to_string(next_tmp_++);
  }
  const int fd = ::openat(dir_fd_, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const std::uint64_t key_size = key.size();
  const bool ok = write_all(fd, reinterpret_cast<const std::uint8_t*>(&key_size), 8) &&
                  write_all(fd, reinterpret_cast<const std::uint8_t*>(key.data()), key.size()) &&
                  write_all(fd, data.data(), data.size());
  ::close(fd);
  if (!ok || ::renameat(dir_fd_, tmp.c_str(), dir_fd_, name.c_str()) != 0) {
    ::unlinkat(dir_fd_, tmp.c_str(), 0);
    return;
  }
  base::MutexLock lock(mu_);
  if (entries_.count(name) != 0) return;
  // Room again: other puts may have filled it between the eviction above and now.
  while (bytes_ + size > capacity_ && !lru_.empty()) forget(lru_.back());
  lru_.push_front(name);
  entries_[name] = Entry{lru_.begin(), size};
  bytes_ += size;
}

std::uint64_t ObjectCache::bytes() const {
  base::MutexLock lock(mu_);
  return bytes_;
}

std::size_t ObjectCache::files() const {
  base::MutexLock lock(mu_);
  return entries_.size();
}

}  // namespace stoker::objstore
