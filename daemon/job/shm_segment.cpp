#include "job/shm_segment.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <sys/mman.h>
#include <unistd.h>

#include <boost/interprocess/shared_memory_object.hpp>

namespace stoker::job {

ShmSegment::ShmSegment(std::string name, std::uint64_t size) : name_(std::move(name)), size_(size) {
  // A named segment left by a stokerd before sealed memfds: remove it.
  boost::interprocess::shared_memory_object::remove(name_.c_str());
  fd_ = ::memfd_create(name_.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd_ < 0) throw std::runtime_error("cannot create shared memory segment '" + name_ + "': " + std::strerror(errno));
  auto fail = [&](const char* what, int e) {
    ::close(fd_);
    throw std::runtime_error("cannot " + std::string(what) + " shared memory segment '" + name_ + "' of " +
                             std::to_string(size) + " bytes (is there enough memory?): " + std::strerror(e));
  };
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) fail("size", errno);
  // Reserve every page now: too little memory must fail here, at start, with a message, not
  // later as SIGBUS inside a worker writing a batch.
  if (const int rc = ::posix_fallocate(fd_, 0, static_cast<off_t>(size)); rc != 0) fail("reserve", rc);
  if (::fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) fail("seal", errno);
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) fail("map", errno);
  base_ = static_cast<std::uint8_t*>(p);
}

bool ShmSegment::write(std::uint64_t offset, const std::uint8_t* from, std::size_t n) const {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd_, from, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    from += w;
    offset += static_cast<std::uint64_t>(w);
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

ShmSegment::~ShmSegment() {
  if (base_ != nullptr) ::munmap(base_, size_);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace stoker::job
