#include "server/instance_lock.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <sys/file.h>
#include <unistd.h>

namespace stoker::server {

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
  const std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] ssize_t w = ::pwrite(fd_, me.data(), me.size(), 0);
  }
}

InstanceLock::~InstanceLock() {
  // The file stays: unlinking it would let a daemon that opened the old inode and one that
  // creates a new file both hold "the" lock.
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace stoker::server
