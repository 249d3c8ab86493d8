// One stokerd per control socket: an exclusive flock on "<socket>.lock", held for the
// daemon's lifetime. The kernel drops it when the process dies, so a killed daemon never
// blocks the next start; the next start then cleans the stale socket and segments.
#pragma once

#include <string>

namespace stoker::server {

class InstanceLock {
 public:
  // Creates the socket's folder (0700) if needed. Throws std::runtime_error naming the
  // socket and the running daemon's pid when another stokerd holds the lock.
  explicit InstanceLock(const std::string& socket_path);
  ~InstanceLock();
  InstanceLock(const InstanceLock&) = delete;
  InstanceLock& operator=(const InstanceLock&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace stoker::server
