// The one way stokerd opens a file a peer named: relative to a directory descriptor it opened
// itself (a job root, a worker's --allow-root, "/" for a client-defined job), never by a path
// checked before.
//
//   base::Result<int> fd = base::confined_open(root_fd, "a/b.jpg", {});
//
// What it guarantees, whatever the peer or another user does to the tree meanwhile:
//  - the descriptor returned is of what was resolved below the root: no "..", absolute path or
//    symlink leads out of it (Scope::kBeneath), or out of it taken as "/" (Scope::kInRoot);
//    /proc magic links are never followed by the kernel;
//  - it is a regular file (or a directory, when asked), checked with fstat on what was opened:
//    a FIFO, device or socket is never opened for reading (the last component is opened O_PATH,
//    looked at, and only a regular file or directory is reopened to read, through
//    /proc/self/fd: the same inode, not the name again);
//  - with a `may` check, every directory the walk passes and the file itself are checked on
//    their descriptors (fstat), so a permission is never decided on a path looked at before;
//  - always O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
//  - every failure is the same text (kRefusal): a caller cannot tell "missing" from "outside"
//    or "not permitted" (what a folder it may not read holds stays unseen).
//
// Resolution: without a `may` check, openat2(RESOLVE_BENEATH or RESOLVE_IN_ROOT,
// RESOLVE_NO_MAGICLINKS) where the kernel has it (5.6+); otherwise (ENOSYS, or a `may` check)
// a walk one component at a time, each opened O_PATH | O_NOFOLLOW from its parent's descriptor
// and fstat'ed; a symlink's text is read from its own descriptor (readlinkat) and resolved by
// the same walk, at most 40 of them, as the kernel would.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <sys/stat.h>

#include "base/status.hpp"

namespace stoker::base {

// The one refusal text of confined_open (callers may put their own single text instead).
inline constexpr std::string_view kRefusal = "not found, not a regular file, or not permitted";

enum class Scope {
  kBeneath,  // like RESOLVE_BENEATH: "..", an absolute path or symlink that leaves the root: refused
  kInRoot,   // like RESOLVE_IN_ROOT: the root is "/" for the walk ("/" at the root stays there)
};

// What a `may` check is asked about.
enum class Need {
  kPass,  // a directory the walk goes through (search permission)
  kRead,  // the file opened (read), or the directory opened (read and search)
};

struct ConfinedOptions {
  bool directory = false;  // open a directory (O_DIRECTORY) instead of a regular file
  Scope scope = Scope::kBeneath;
  // kBeneath only: the root's own absolute path (as the daemon names it, no trailing '/'). An
  // absolute symlink whose text lies below it is then followed from the root's descriptor
  // (the text names it; the descriptor is what is used); any other absolute symlink: refused.
  std::string root_path;
  // When set: asked for the root, every directory passed and what is opened, with its fstat;
  // false refuses. The walk is then always used (openat2 does not show the directories).
  std::function<bool(const struct stat&, Need)> may;
};

// Opens `relative` below `root_fd` (a directory descriptor; O_PATH is enough) for reading.
// Returns the descriptor (the caller closes it) or kRefusal.
Result<int> confined_open(int root_fd, std::string_view relative, const ConfinedOptions& options);

// Whether the kernel has openat2 (checked once). Tests only.
bool have_openat2();
// Test hook: false makes confined_open use the walk even where openat2 exists.
void set_openat2_enabled(bool enabled);

// A descriptor closed with its owner. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd();
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  int release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Opens a directory to be a root of confined_open (O_PATH | O_DIRECTORY | O_CLOEXEC, following
// symlinks: the path is the daemon's own configuration). The error names the path.
Result<UniqueFd> open_root(const std::string& path);

}  // namespace stoker::base
