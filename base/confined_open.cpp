#include "base/confined_open.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>

namespace stoker::base {
namespace {

constexpr int kMaxSymlinks = 40;  // as the kernel's MAXSYMLINKS
constexpr int kReadFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;

std::atomic<bool> g_openat2_enabled{true};

Status refused() { return Status::error(std::string(kRefusal)); }

int retry_open(const auto& op) {
  int fd = -1;
  do {
    fd = op();
  } while (fd < 0 && errno == EINTR);
  return fd;
}

bool same_inode(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

// Reopens `opath_fd` (O_PATH, of a regular file or directory whose fstat is `st`) to read: the
// same inode through /proc/self/fd (never the name again). Where /proc is not mounted, the name
// `name` is opened again in `parent_fd` with O_NOFOLLOW | O_NONBLOCK and must be the same inode.
Result<int> reopen_to_read(int opath_fd, const struct stat& st, int parent_fd, const std::string& name) {
  const int dir_flag = S_ISDIR(st.st_mode) ? O_DIRECTORY : 0;
  const std::string proc = "/proc/self/fd/" + std::to_string(opath_fd);
  int fd = retry_open([&] { return ::open(proc.c_str(), kReadFlags | dir_flag); });
  if (fd < 0 && errno == ENOENT) {
    fd = S_ISDIR(st.st_mode) ? retry_open([&] { return ::openat(opath_fd, ".", kReadFlags | O_DIRECTORY); })
         : parent_fd >= 0    ? retry_open([&] { return ::openat(parent_fd, name.c_str(), kReadFlags | O_NOFOLLOW); })
                             : -1;
  }
  if (fd < 0) return refused();
  struct stat now {};
  if (::fstat(fd, &now) != 0 || !same_inode(now, st) || (now.st_mode & S_IFMT) != (st.st_mode & S_IFMT)) {
    ::close(fd);
    return refused();
  }
  return fd;
}

bool wanted_type(const struct stat& st, bool directory) {
  return directory ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode);
}

void push_components(std::deque<std::string>& queue, std::string_view path) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t slash = std::min(path.find('/', start), path.size());
    if (slash > start) parts.emplace_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  queue.insert(queue.begin(), parts.begin(), parts.end());
}

// The directories the walk stands in: [0] is the caller's root (not ours to close).
class DirStack {
 public:
  DirStack(int root, const struct stat& st) { dirs_.push_back({root, st}); }
  ~DirStack() {
    for (std::size_t i = 1; i < dirs_.size(); ++i) ::close(dirs_[i].fd);
  }
  DirStack(const DirStack&) = delete;
  DirStack& operator=(const DirStack&) = delete;
  int top() const { return dirs_.back().fd; }
  const struct stat& top_stat() const { return dirs_.back().st; }
  std::size_t depth() const { return dirs_.size(); }
  void push(int fd, const struct stat& st) { dirs_.push_back({fd, st}); }
  void pop() {
    ::close(dirs_.back().fd);
    dirs_.pop_back();
  }
  void to_root() {
    while (dirs_.size() > 1) pop();
  }

 private:
  struct Dir {
    int fd;
    struct stat st;
  };
  std::vector<Dir> dirs_;
};

Result<int> walk_open(int root_fd, std::string_view relative, const ConfinedOptions& o) {
  struct stat root_st {};
  if (::fstat(root_fd, &root_st) != 0 || !S_ISDIR(root_st.st_mode)) return refused();
  DirStack dirs(root_fd, root_st);
  std::deque<std::string> queue;
  if (!relative.empty() && relative.front() == '/' && o.scope == Scope::kBeneath) return refused();
  push_components(queue, relative);
  int links = 0;
  int file_fd = -1;  // O_PATH descriptor of a non-directory reached (the last component)
  struct stat file_st {};
  std::string file_name;
  while (!queue.empty()) {
    const std::string c = std::move(queue.front());
    queue.pop_front();
    if (c == ".") continue;
    // A name is looked up in the directory on top: the kernel asks for search permission there.
    if (o.may && !o.may(dirs.top_stat(), Need::kPass)) return refused();
    if (c == "..") {
      if (dirs.depth() > 1) {
        dirs.pop();
      } else if (o.scope == Scope::kBeneath) {
        return refused();
      }
      continue;
    }
    const int fd = retry_open([&] { return ::openat(dirs.top(), c.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC); });
    if (fd < 0) return refused();
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      return refused();
    }
    if (S_ISDIR(st.st_mode)) {
      dirs.push(fd, st);
      continue;
    }
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      const ssize_t n = ::readlinkat(fd, "", target, sizeof target);
      ::close(fd);
      if (n <= 0 || static_cast<std::size_t>(n) >= sizeof target || ++links > kMaxSymlinks) return refused();
      const std::string_view text(target, static_cast<std::size_t>(n));
      std::string_view rest = text;
      if (text.front() == '/') {
        if (o.scope == Scope::kBeneath) {
          const std::string_view r = o.root_path;
          if (r.empty() || r.front() != '/' || !(text == r || (text.size() > r.size() && text.starts_with(r) &&
                                                               (text[r.size()] == '/' || r == "/")))) {
            return refused();
          }
          rest = text.substr(r.size());
        }
        dirs.to_root();
      }
      push_components(queue, rest);
      continue;
    }
    // Anything else ends the walk: it must be the last component.
    if (!queue.empty()) {  // "file/." or "file/x": not a file either (ENOTDIR)
      ::close(fd);
      return refused();
    }
    file_fd = fd;
    file_st = st;
    file_name = c;
    break;
  }
  if (file_fd < 0) {  // the walk ended on a directory
    if (!o.directory || (o.may && !o.may(dirs.top_stat(), Need::kRead))) return refused();
    return reopen_to_read(dirs.top(), dirs.top_stat(), -1, {});
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{file_fd};
  if (!wanted_type(file_st, o.directory) || (o.may && !o.may(file_st, Need::kRead))) return refused();
  return reopen_to_read(file_fd, file_st, dirs.top(), file_name);
}

// openat2 where there is one: nullopt when the kernel lacks it (or refuses the flags), so the
// walk decides.
std::optional<Result<int>> kernel_open(int root_fd, std::string_view relative, const ConfinedOptions& o) {
  if (!g_openat2_enabled.load(std::memory_order_relaxed)) return std::nullopt;
  open_how how{};
  how.flags = O_PATH | O_CLOEXEC | (o.directory ? O_DIRECTORY : 0);
  how.resolve = (o.scope == Scope::kBeneath ? RESOLVE_BENEATH : RESOLVE_IN_ROOT) | RESOLVE_NO_MAGICLINKS;
  const std::string path = relative.empty() ? std::string(".") : std::string(relative);
  long fd = -1;
  for (int attempt = 0; attempt < 8; ++attempt) {
    fd = ::syscall(SYS_openat2, root_fd, path.c_str(), &how, sizeof how);
    if (fd >= 0 || (errno != EINTR && errno != EAGAIN)) break;  // EAGAIN: a rename raced the lookup
  }
  if (fd < 0) {
    // EXDEV: an absolute symlink, which the walk follows when it stays below o.root_path.
    if (errno == ENOSYS || errno == EPERM /* seccomp */ || errno == E2BIG || errno == EINVAL || errno == EAGAIN ||
        (errno == EXDEV && !o.root_path.empty())) {
      return std::nullopt;
    }
    return Result<int>(refused());
  }
  const int opath = static_cast<int>(fd);
  struct stat st {};
  Result<int> out = refused();
  if (::fstat(opath, &st) == 0 && wanted_type(st, o.directory)) out = reopen_to_read(opath, st, -1, {});
  ::close(opath);
  return out;
}

}  // namespace

bool have_openat2() {
  static const bool have = [] {
    open_how how{};
    how.flags = O_PATH | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH;
    const long fd = ::syscall(SYS_openat2, AT_FDCWD, ".", &how, sizeof how);
    if (fd >= 0) ::close(static_cast<int>(fd));
    return fd >= 0;
  }();
  return have;
}

void set_openat2_enabled(bool enabled) { g_openat2_enabled.store(enabled, std::memory_order_relaxed); }

Result<int> confined_open(int root_fd, std::string_view relative, const ConfinedOptions& options) {
  if (root_fd < 0 || relative.find('\0') != std::string_view::npos || relative.size() > 4096) return refused();
  if (!options.may) {
    if (std::optional<Result<int>> r = kernel_open(root_fd, relative, options)) return std::move(*r);
  }
  return walk_open(root_fd, relative, options);
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

Result<UniqueFd> open_root(const std::string& path) {
  const int fd = retry_open([&] { return ::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC); });
  if (fd < 0) return Status::error(path + ": cannot open as a folder: " + std::strerror(errno));
  return UniqueFd(fd);
}

}  // namespace stoker::base
