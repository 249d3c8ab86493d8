#include "app/instance_lock.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace stoker::app {
namespace {

// True when `path` names the very file open on `fd` (same device and inode).
bool path_names(const std::string& path, int fd) {
  struct stat by_fd {}, by_path {};
  if (::fstat(fd, &by_fd) != 0 || ::stat(path.c_str(), &by_path) != 0) return false;
  return by_fd.st_dev == by_path.st_dev && by_fd.st_ino == by_path.st_ino;
}

}  // namespace

InstanceLock::InstanceLock(const std::string& socket_path) : path_(socket_path + ".lock") {
  const auto dir = std::filesystem::path(socket_path).parent_path();
  if (!dir.empty()) {
    std::error_code ec;
    if (std::filesystem::create_directories(dir, ec)) {
      std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
    }
    if (!std::filesystem::is_directory(dir)) {
      throw std::runtime_error("cannot create the socket folder " + dir.string() + ": " +
                               ec.message());
    }
  }
  // Each turn that ends in `continue` lost a race with an exiting holder that unlinked the
  // file between our open() and our flock(); another daemon can win at most one such race per
  // exit, so a few turns suffice (the bound only guards against a broken file system).
  for (int attempt = 0; attempt < 100; ++attempt) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0) {
      throw std::runtime_error("cannot open lock file " + path_ + ": " + std::strerror(errno));
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      char buf[32] = {};
      const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
      ::close(fd_);
      fd_ = -1;
      std::string pid = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "?";
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      throw std::runtime_error("another stokerd (pid " + pid + ") is already running on " +
                               socket_path);
    }
    if (!path_names(path_, fd_)) {  // locked an unlinked file: its holder has just exited
      ::close(fd_);
      fd_ = -1;
      continue;
    }
    const std::string me = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd_, 0) == 0) {
      [[maybe_unused]] ssize_t w = ::pwrite(fd_, me.data(), me.size(), 0);
    }
    return;
  }
  throw std::runtime_error("cannot lock " + path_ + ": it is replaced each time it is opened");
}

InstanceLock::~InstanceLock() {
  if (fd_ < 0) return;
  // Unlinked before the lock is released: a daemon that opened this inode and gets the lock
  // after us sees that the path no longer names it and starts over (constructor).
  if (path_names(path_, fd_)) ::unlink(path_.c_str());
  ::close(fd_);
}

}  // namespace stoker::app
