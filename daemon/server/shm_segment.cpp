#include "server/shm_segment.hpp"

#include <stdexcept>
#include <cstring>
#include <fcntl.h>

#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/permissions.hpp>

namespace bip = boost::interprocess;

namespace stoker::server {
namespace {

bip::shared_memory_object create_fresh(const std::string& name, unsigned mode) {
  bip::shared_memory_object::remove(name.c_str());  // stale from a killed daemon
  bip::permissions perms(mode);
  try {
    return bip::shared_memory_object(bip::create_only, name.c_str(), bip::read_write, perms);
  } catch (const bip::interprocess_exception& e) {
    throw std::runtime_error("cannot create shared memory segment '" + name + "': " + e.what());
  }
}

}  // namespace

ShmSegment::ShmSegment(std::string name, std::uint64_t size, unsigned mode)
    : name_(std::move(name)), shm_(create_fresh(name_, mode)) {
  try {
    shm_.truncate(static_cast<bip::offset_t>(size));
    // Reserve every page now: a /dev/shm that is too small must fail here, at start, with a
    // message, not later as SIGBUS inside a worker writing a batch.
    if (int rc = ::posix_fallocate(shm_.get_mapping_handle().handle, 0, static_cast<off_t>(size));
        rc != 0) {
      throw bip::interprocess_exception(std::strerror(rc));
    }
    region_ = bip::mapped_region(shm_, bip::read_write, 0, size);
  } catch (const bip::interprocess_exception& e) {
    bip::shared_memory_object::remove(name_.c_str());
    throw std::runtime_error("cannot size shared memory segment '" + name_ + "' to " +
                             std::to_string(size) + " bytes (is /dev/shm large enough?): " +
                             e.what());
  }
}

ShmSegment::~ShmSegment() { bip::shared_memory_object::remove(name_.c_str()); }

}  // namespace stoker::server
