#include "source/file_reader.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace stoker::source {
namespace {

ReadResult failure(const char* what, int e) {
  ReadResult r;
  r.status = is_transient_errno(e) ? ReadStatus::kTransient : ReadStatus::kMissing;
  r.error = e;
  r.reason = std::string(what) + ": " + std::strerror(e);
  return r;
}

// Closes on every path out of read_file.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

bool is_transient_errno(int e) {
  switch (e) {
    case EMFILE: case ENFILE: case ENOMEM: case EAGAIN: case EINTR: case EIO:
    case ENOBUFS: case ETIMEDOUT: case ESTALE: case EBUSY: case ENOLCK: case EDEADLK:
      return true;
    default:
      return false;
  }
}

namespace {

int open_retrying(const std::string& path) {
  int fd = -1;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// Fills `out` (already sized) from `offset` on; a short read is transient (a file system
// that gave fewer bytes than the size it reported may give them on a retry).
ReadResult read_fully(int fd, std::uint64_t offset, std::vector<std::uint8_t>& out) {
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failure("read failed", errno);
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got < out.size()) {
    ReadResult r;
    r.status = ReadStatus::kTransient;
    r.reason = "short read: " + std::to_string(got) + " of " + std::to_string(out.size()) + " bytes";
    return r;
  }
  return {};
}

}  // namespace

ReadResult read_file(const std::string& path, std::vector<std::uint8_t>& out) {
  const int fd = open_retrying(path);
  if (fd < 0) return failure("cannot open", errno);
  Fd guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return failure("cannot stat", errno);
  if (S_ISDIR(st.st_mode)) return failure("cannot read", EISDIR);
  out.resize(static_cast<std::size_t>(st.st_size));
  return read_fully(fd, 0, out);
}

ReadResult read_range(const std::string& path, std::uint64_t offset, std::uint64_t size,
                      std::vector<std::uint8_t>& out) {
  const int fd = open_retrying(path);
  if (fd < 0) return failure("cannot open", errno);
  Fd guard{fd};
  return read_range_at(fd, offset, size, out);
}

ReadResult read_range_at(int fd, std::uint64_t offset, std::uint64_t size, std::vector<std::uint8_t>& out) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return failure("cannot stat", errno);
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  if (size > file_size || offset > file_size - size) {
    ReadResult r;
    r.status = ReadStatus::kMissing;
    r.reason = "the shard is " + std::to_string(file_size) + " bytes now, the member ends at " +
               std::to_string(offset + size) + " (changed since it was indexed; restart to index it again)";
    return r;
  }
  out.resize(static_cast<std::size_t>(size));
  return read_fully(fd, offset, out);
}

int open_for_read(const std::string& path, ReadResult& failed) {
  const int fd = open_retrying(path);
  if (fd < 0) failed = failure("cannot open", errno);
  return fd;
}

}  // namespace stoker::source
