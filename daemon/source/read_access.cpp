#include "source/read_access.hpp"

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <unistd.h>

namespace stoker::source {
namespace {

std::string refusal(const ReadAs& as) {
  return "not found, or not readable by uid " + std::to_string(as.uid) +
         " (the client's user: stokerd reads a client-defined job's files only where that user could)";
}

// The path a descriptor is open on, as the kernel resolved it (symlinks followed); "" when it
// has none (deleted, or not a path at all).
std::string real_path_of(int fd) {
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  std::string buf(4096, '\0');
  const ssize_t n = ::readlink(link.c_str(), buf.data(), buf.size());
  if (n <= 0 || static_cast<std::size_t>(n) >= buf.size()) return {};
  buf.resize(static_cast<std::size_t>(n));
  if (buf.front() != '/' || buf.ends_with(" (deleted)")) return {};
  return buf;
}

}  // namespace

bool mode_grants(const struct stat& st, const ReadAs& as, int want) {
  if (as.uid == 0) return true;
  unsigned bits = 0;
  if (st.st_uid == as.uid) {
    bits = (st.st_mode >> 6) & 7;
  } else if (st.st_gid == as.gid || std::find(as.groups.begin(), as.groups.end(), st.st_gid) != as.groups.end()) {
    bits = (st.st_mode >> 3) & 7;
  } else {
    bits = st.st_mode & 7;
  }
  return (bits & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
}

std::string check_readable_fd(int fd, const ReadAs& as) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return refusal(as);
  const int want = S_ISDIR(st.st_mode) ? kMayRead | kMayPass : kMayRead;
  if (!mode_grants(st, as, want)) return refusal(as);
  // Every folder above: the user must be able to pass it to reach this. The real path is
  // the one the kernel resolved for this very descriptor, so a symlink swapped after the
  // open changes nothing.
  const std::string path = real_path_of(fd);
  if (path.empty()) return refusal(as);
  for (std::size_t slash = path.rfind('/'); slash != std::string::npos && slash > 0; slash = path.rfind('/', slash - 1)) {
    struct stat dir {};
    if (::stat(path.substr(0, slash).c_str(), &dir) != 0 || !S_ISDIR(dir.st_mode) || !mode_grants(dir, as, kMayPass)) {
      return refusal(as);
    }
  }
  struct stat root {};
  if (::stat("/", &root) != 0 || !mode_grants(root, as, kMayPass)) return refusal(as);
  return {};
}

base::Result<int> open_checked(const std::string& path, const ReadAs& as, bool directory) {
  // Looked at before opening too: opening a device or a FIFO can act on it (a tape rewinds, a
  // FIFO's writer is woken), and what the user may not read is better not opened at all. The
  // descriptor is checked again after the open, which is what decides.
  struct stat before {};
  if (::stat(path.c_str(), &before) != 0 || (directory ? !S_ISDIR(before.st_mode) : !S_ISREG(before.st_mode)) ||
      !mode_grants(before, as, directory ? kMayRead | kMayPass : kMayRead)) {
    return base::Status::error(refusal(as));
  }
  int fd = -1;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | (directory ? O_DIRECTORY : 0));
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return base::Status::error(refusal(as));
  if (std::string why = check_readable_fd(fd, as); !why.empty()) {
    ::close(fd);
    return base::Status::error(std::move(why));
  }
  // O_NONBLOCK only kept a FIFO from blocking the open; reads of regular files ignore it,
  // but clear it anyway so the descriptor behaves as any other.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace stoker::source
