#include "store/decoded_store.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log/log.hpp"
#include "store/checksum.hpp"
#include "store/store_format.hpp"

namespace stoker::store {

namespace fs = std::filesystem;

namespace {

std::uint64_t path_hash(std::string_view path) { return checksum64(path.data(), path.size(), 0x5354); }

std::uint64_t header_sum(const EntryHeader& h, std::string_view path) {
  return checksum64(&h, offsetof(EntryHeader, header_sum), checksum64(path.data(), path.size()));
}

bool read_all(int fd, void* buf, std::size_t n, std::uint64_t off) {
  auto* p = static_cast<std::uint8_t*>(buf);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(off));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      if (got == 0) errno = 0;  // short: truncated under us
      return false;
    }
    p += got;
    n -= static_cast<std::size_t>(got);
    off += static_cast<std::uint64_t>(got);
  }
  return true;
}

bool write_all(int fd, const void* buf, std::size_t n, std::uint64_t off) {
  const auto* p = static_cast<const std::uint8_t*>(buf);
  while (n > 0) {
    const ssize_t put = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) {
      if (put == 0) errno = ENOSPC;
      return false;
    }
    p += put;
    n -= static_cast<std::size_t>(put);
    off += static_cast<std::uint64_t>(put);
  }
  return true;
}

// flock(LOCK_EX) for one append or one repair, across daemons (this daemon's writers are
// already serialized by the store's mutex).
class FileLock {
 public:
  explicit FileLock(int fd) : fd_(fd) {
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~FileLock() { ::flock(fd_, LOCK_UN); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

base::Mutex g_open_mu;
std::unordered_map<std::string, std::weak_ptr<DecodedStore>> g_open STOKER_GUARDED_BY(g_open_mu);

}  // namespace

std::string DecodedStore::file_name(std::uint64_t source_id, std::uint32_t max_side) {
  char name[64];
  std::snprintf(name, sizeof name, "%016llx-%u.pixels", static_cast<unsigned long long>(source_id), max_side);
  return name;
}

namespace {

std::string mode_text(mode_t m) {
  char b[8];
  std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(m & 07777));
  return b;
}

// The store's folder: created if missing (0700), and it must be the daemon's user's and
// writable by no one else, or another user could plant a symlink or a file in it (B2).
int open_store_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir.parent_path(), ec);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      throw std::runtime_error("decoded_store: cannot create " + dir.string() + ": " + std::strerror(errno));
    }
  }
  const int dfd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) throw std::runtime_error("decoded_store: cannot open the folder " + dir.string() + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(dfd, &st) != 0 || st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    ::close(dfd);
    throw std::runtime_error("decoded_store: the folder " + dir.string() + " is owned by uid " +
                             std::to_string(st.st_uid) + " with mode " + mode_text(st.st_mode) +
                             "; stokerd keeps a store only in a folder of its own user (uid " +
                             std::to_string(::geteuid()) + ") that no one else may write (chmod go-w, chown)");
  }
  return dfd;
}

// The data file: created O_EXCL | O_NOFOLLOW mode 0600, or an existing one that is a regular
// file of the daemon's user, writable by it alone, with one link; anything else is refused —
// never truncated, never used (B1).
int open_store_file(int dfd, const std::string& name, const fs::path& file) {
  int fd = ::openat(dfd, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  if (errno != EEXIST) throw std::runtime_error("decoded_store: cannot create " + file.string() + ": " + std::strerror(errno));
  const int opath = ::openat(dfd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  struct stat st {};
  if (opath < 0 || ::fstat(opath, &st) != 0) {
    const int err = errno;
    if (opath >= 0) ::close(opath);
    throw std::runtime_error("decoded_store: cannot open " + file.string() + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0 || st.st_nlink != 1) {
    ::close(opath);
    throw std::runtime_error("decoded_store: " + file.string() + " is " +
                             (S_ISLNK(st.st_mode)  ? std::string("a symlink")
                              : !S_ISREG(st.st_mode) ? std::string("not a regular file")
                                                     : "owned by uid " + std::to_string(st.st_uid) + " with mode " +
                                                           mode_text(st.st_mode) + " and " +
                                                           std::to_string(st.st_nlink) + " link(s)") +
                             "; stokerd uses only a store file of its own (uid " + std::to_string(::geteuid()) +
                             ", writable by it alone, one link): not used, not changed (remove it)");
  }
  // The same inode, to write: never the name again.
  const std::string proc = "/proc/self/fd/" + std::to_string(opath);
  fd = ::open(proc.c_str(), O_RDWR | O_CLOEXEC);
  struct stat now {};
  if (fd >= 0 && (::fstat(fd, &now) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev)) {
    ::close(fd);
    fd = -1;
    errno = ESTALE;
  }
  const int err = errno;
  ::close(opath);
  if (fd < 0) throw std::runtime_error("decoded_store: cannot open " + file.string() + ": " + std::strerror(err));
  return fd;
}

}  // namespace

std::shared_ptr<DecodedStore> DecodedStore::open(const fs::path& dir, std::uint64_t source_id, std::uint32_t max_side,
                                                 std::uint64_t budget) {
  const fs::path file = fs::absolute(dir / file_name(source_id, max_side));
  base::MutexLock lock(g_open_mu);
  if (auto it = g_open.find(file.string()); it != g_open.end()) {
    if (auto shared = it->second.lock()) return shared;
  }
  const int dfd = open_store_dir(fs::absolute(dir));
  int fd = -1;
  try {
    fd = open_store_file(dfd, file_name(source_id, max_side), file);
  } catch (...) {
    ::close(dfd);
    throw;
  }
  ::close(dfd);
  std::string not_ours;
  {
    FileLock fl(fd);
    FileHeader h{};
    struct stat st{};
    ::fstat(fd, &st);
    bool fresh = st.st_size == 0;
    if (!fresh) {
      const bool ok = st.st_size >= static_cast<off_t>(sizeof h) && read_all(fd, &h, sizeof h, 0) &&
                      std::memcmp(h.magic, kFileMagic, sizeof kFileMagic) == 0 && h.max_side == max_side;
      if (!ok) {
        // Only a store file (its magic's first six bytes) of another version or with a damaged
        // header is started again; anything else is not ours to truncate (B1).
        const bool store_file = st.st_size >= 6 && read_all(fd, &h, std::min<std::size_t>(sizeof h, st.st_size), 0) &&
                                std::memcmp(h.magic, kFileMagic, 6) == 0;
        if (!store_file) not_ours = " is not a store file; not used, not changed (remove it)";
        if (store_file)
          stoker::log::warn(
              "decoded_store {}: a store file of another version or with a damaged header; starting it empty",
              file.string());
        fresh = store_file;
      }
    }
    if (fresh && not_ours.empty()) {
      h = FileHeader{};
      std::memcpy(h.magic, kFileMagic, sizeof kFileMagic);
      h.max_side = max_side;
      if (::ftruncate(fd, 0) != 0 || !write_all(fd, &h, sizeof h, 0)) {
        const int err = errno;
        ::close(fd);
        throw std::runtime_error("decoded_store: cannot write " + file.string() + ": " + std::strerror(err));
      }
    }
  }
  if (!not_ours.empty()) {
    ::close(fd);
    throw std::runtime_error("decoded_store: " + file.string() + not_ours);
  }
  std::shared_ptr<DecodedStore> s(new DecodedStore(file, fd, max_side, budget));
  {
    base::MutexLock l(s->mu_);
    s->scan();
  }
  g_open[file.string()] = s;
  const StoreStats st = s->stats();
  stoker::log::info("decoded_store {}: {} entr{}, {} MiB of {} MiB", file.string(), st.entries,
                    st.entries == 1 ? "y" : "ies", st.bytes >> 20, budget >> 20);
  return s;
}

DecodedStore::DecodedStore(fs::path file, int fd, std::uint32_t max_side, std::uint64_t budget)
    : file_(std::move(file)), fd_(fd), max_side_(max_side), budget_(budget) {
  scanned_end_ = sizeof(FileHeader);
}

DecodedStore::~DecodedStore() { ::close(fd_); }

std::uint64_t DecodedStore::scan() {
  struct stat st{};
  if (::fstat(fd_, &st) != 0) return scanned_end_;
  const auto end = static_cast<std::uint64_t>(st.st_size);
  if (end < scanned_end_) {
    // Cut under us (by hand, another process): what the index knows past the end is gone, and
    // an append must not leave a hole; index again from the start.
    index_.clear();
    scanned_end_ = sizeof(FileHeader);
  }
  std::string path;
  while (scanned_end_ + sizeof(EntryHeader) <= end) {
    EntryHeader h{};
    if (!read_all(fd_, &h, sizeof h, scanned_end_)) break;
    if (h.magic != kEntryMagic || h.path_bytes == 0 || h.path_bytes > kMaxPathBytes || h.width == 0 ||
        h.height == 0 || h.width > kMaxSide || h.height > kMaxSide ||
        h.pixel_bytes != std::uint64_t{h.width} * h.height * 3) {
      break;
    }
    const std::uint64_t record = sizeof h + h.path_bytes + h.pixel_bytes;
    if (scanned_end_ + record > end) break;  // torn: its writer did not finish
    path.resize(h.path_bytes);
    if (!read_all(fd_, path.data(), path.size(), scanned_end_ + sizeof h)) break;
    if (header_sum(h, path) != h.header_sum) break;
    index_[path_hash(path)] = Entry{scanned_end_, h.file_size, h.mtime_ns, static_cast<std::uint32_t>(record)};
    scanned_end_ += record;
  }
  file_bytes_.store(scanned_end_);
  return end;
}

bool DecodedStore::contains(const EntryKey& key) {
  base::MutexLock lock(mu_);
  auto it = index_.find(path_hash(key.path));
  return it != index_.end() && it->second.size == key.size && it->second.mtime_ns == key.mtime_ns;
}

bool DecodedStore::has_path(std::string_view path) {
  base::MutexLock lock(mu_);
  return index_.count(path_hash(path)) != 0;
}

DecodedStore::Lookup DecodedStore::get(const EntryKey& key, std::vector<std::uint8_t>& buffer, StoredImage& out) {
  const std::uint64_t hash = path_hash(key.path);
  Entry e;
  {
    base::MutexLock lock(mu_);
    auto it = index_.find(hash);
    if (it == index_.end()) {
      // Perhaps appended by another daemon since: catch up (cheap when nothing was).
      scan();
      it = index_.find(hash);
      if (it == index_.end()) return Lookup::kMissing;
    }
    e = it->second;
  }
  if (e.size != key.size || e.mtime_ns != key.mtime_ns) return Lookup::kMissing;  // the file changed since
  buffer.resize(e.record_bytes);
  bool good = read_all(fd_, buffer.data(), buffer.size(), e.offset);
  if (!good && errno != 0) io_error("read", errno);
  EntryHeader h{};
  if (good) {
    std::memcpy(&h, buffer.data(), sizeof h);
    const std::string_view path(reinterpret_cast<const char*>(buffer.data()) + sizeof h,
                                std::min<std::size_t>(h.path_bytes, buffer.size() - sizeof h));
    good = h.magic == kEntryMagic && sizeof h + std::uint64_t{h.path_bytes} + h.pixel_bytes == e.record_bytes &&
           h.pixel_bytes == std::uint64_t{h.width} * h.height * 3 && header_sum(h, path) == h.header_sum &&
           path == key.path && h.file_size == key.size && h.mtime_ns == key.mtime_ns &&
           checksum64(buffer.data() + sizeof h + h.path_bytes, h.pixel_bytes) == h.pixel_sum;
  }
  if (!good) {
    rebuilt_++;
    // Forget it, so other workers decode too rather than read it again; put() indexes the
    // fresh entry.
    base::MutexLock lock(mu_);
    if (auto it = index_.find(hash); it != index_.end() && it->second.offset == e.offset) index_.erase(it);
    return Lookup::kBroken;
  }
  out.width = h.width;
  out.height = h.height;
  out.orientation = static_cast<int>(h.orientation);
  out.pixels = buffer.data() + sizeof h + h.path_bytes;
  return Lookup::kHit;
}

void DecodedStore::put(const EntryKey& key, const StoredImage& image) {
  if (writes_off_.load() || key.path.empty() || key.path.size() > kMaxPathBytes || image.width == 0 ||
      image.height == 0 || image.width > kMaxSide || image.height > kMaxSide) {
    return;
  }
  EntryHeader h{};
  h.magic = kEntryMagic;
  h.path_bytes = static_cast<std::uint32_t>(key.path.size());
  h.width = image.width;
  h.height = image.height;
  h.orientation = static_cast<std::uint32_t>(image.orientation);
  h.file_size = key.size;
  h.mtime_ns = key.mtime_ns;
  h.pixel_bytes = std::uint64_t{image.width} * image.height * 3;
  h.pixel_sum = checksum64(image.pixels, h.pixel_bytes);
  h.header_sum = header_sum(h, key.path);
  const std::uint64_t record = sizeof h + h.path_bytes + h.pixel_bytes;

  base::MutexLock lock(mu_);
  if (writes_off_.load()) return;
  FileLock fl(fd_);
  // Others' appends first (another daemon), so this one goes after them, and a torn tail
  // (a writer killed mid-entry) is cut off before anything is written behind it.
  const std::uint64_t end = scan();
  if (auto it = index_.find(path_hash(key.path));
      it != index_.end() && it->second.size == key.size && it->second.mtime_ns == key.mtime_ns) {
    return;  // another worker or daemon stored it meanwhile
  }
  if (scanned_end_ + record > budget_) {
    refused_++;
    if (!logged_full_.exchange(true)) {
      stoker::log::info(
          "decoded_store {}: budget of {} MiB reached; the entries stored are kept, later samples are "
          "decoded every epoch",
          file_.string(), budget_ >> 20);
    }
    return;
  }
  if (end > scanned_end_) {
    stoker::log::warn(
        "decoded_store {}: {} byte(s) after offset {} are torn or damaged; cut off (their samples are "
        "decoded again)",
        file_.string(), end - scanned_end_, scanned_end_);
    if (::ftruncate(fd_, static_cast<off_t>(scanned_end_)) != 0) {
      io_error("truncate", errno);
      writes_off_.store(true);
      return;
    }
  }
  // One write: header, path, pixels (a short record left by a failure is cut off below).
  std::vector<std::uint8_t> bytes(record);
  std::memcpy(bytes.data(), &h, sizeof h);
  std::memcpy(bytes.data() + sizeof h, key.path.data(), key.path.size());
  std::memcpy(bytes.data() + sizeof h + h.path_bytes, image.pixels, h.pixel_bytes);
  if (!write_all(fd_, bytes.data(), bytes.size(), scanned_end_)) {
    io_error("write", errno);
    writes_off_.store(true);
    if (::ftruncate(fd_, static_cast<off_t>(scanned_end_)) != 0) {
      // Left as it is: the next scan sees a torn entry and stops before it.
    }
    return;
  }
  index_[path_hash(key.path)] = Entry{scanned_end_, key.size, key.mtime_ns, static_cast<std::uint32_t>(record)};
  scanned_end_ += record;
  file_bytes_.store(scanned_end_);
}

void DecodedStore::io_error(const char* what, int err) {
  errors_++;
  if (!logged_error_.exchange(true)) {
    stoker::log::warn("decoded_store {}: {} failed: {}; {}", file_.string(), what, std::strerror(err),
                      std::strcmp(what, "read") == 0 ? "the sample is decoded instead"
                                                     : "no more entries are written this run (samples are decoded)");
  }
}

StoreStats DecodedStore::stats() const {
  StoreStats s;
  {
    base::MutexLock lock(mu_);
    s.entries = index_.size();
  }
  s.bytes = file_bytes_.load();
  s.budget = budget_;
  s.rebuilt = rebuilt_.load();
  s.errors = errors_.load();
  s.refused_full = refused_.load();
  s.writes_off = writes_off_.load();
  return s;
}

}  // namespace stoker::store
