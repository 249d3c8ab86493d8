#include "source/read_access.hpp"

#include "base/confined_open.hpp"

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
  // Resolved one component at a time from a descriptor of "/" (base/confined_open.hpp): every
  // folder passed and the file itself are checked on the descriptor the walk holds (fstat), a
  // symlink's text is read from the link itself, and only a regular file (or a folder, when
  // asked) is ever opened to read — a FIFO or device swapped in is looked at through O_PATH and
  // refused, never opened. No path is checked and then opened by name.
  static const int slash = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  std::string absolute = path;
  if (absolute.empty() || absolute.front() != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd) == nullptr) return base::Status::error(refusal(as));
    absolute = std::string(cwd) + "/" + path;
  }
  base::ConfinedOptions o;
  o.directory = directory;
  o.scope = base::Scope::kInRoot;  // "/" is the root: the walk resolves as the kernel would
  o.may = [&as](const struct stat& st, base::Need need) {
    if (need == base::Need::kPass) return S_ISDIR(st.st_mode) && mode_grants(st, as, kMayPass);
    return mode_grants(st, as, S_ISDIR(st.st_mode) ? kMayRead | kMayPass : kMayRead);
  };
  base::Result<int> fd = base::confined_open(slash, absolute, o);
  if (!fd) return base::Status::error(refusal(as));
  return fd;
}

}  // namespace stoker::source
