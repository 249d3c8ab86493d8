// One stokerd per control socket: an exclusive flock on "<socket>.lock", held for the
// daemon's lifetime. The kernel drops it when the process dies, so a killed daemon never
// blocks the next start; the next start then cleans the stale socket and segments.
//
// A clean exit removes the lock file too (the socket folder is left as it was found). The
// invariant that keeps that safe: the holder is whoever holds the flock on the inode that the
// path names *now*. The holder unlinks the path while it still holds the flock; a starting
// daemon that locked an inode and then finds the path gone or naming another inode has
// locked a file nobody will look at again, so it drops it and opens the path anew.
#pragma once

#include <string>

namespace stoker::app {

class InstanceLock {
 public:
  // Creates the socket's folder (0700) if needed. Throws std::runtime_error naming the
  // socket and the running daemon's pid when another stokerd holds the lock.
  explicit InstanceLock(const std::string& socket_path);
  // Unlinks the lock file (while still holding the lock), then releases it.
  ~InstanceLock();
  InstanceLock(const InstanceLock&) = delete;
  InstanceLock& operator=(const InstanceLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace stoker::app
