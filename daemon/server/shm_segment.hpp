// Owner of one job's shared-memory segment (Boost.Interprocess). Created at start, removed
// in the destructor; a stale segment of the same name (a killed daemon's) is removed first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>

namespace stoker::server {

class ShmSegment {
 public:
  // Throws std::runtime_error with the name, size and a hint when /dev/shm is too small.
  ShmSegment(std::string name, std::uint64_t size, unsigned mode);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  std::uint8_t* base() const { return static_cast<std::uint8_t*>(region_.get_address()); }
  std::uint64_t size() const { return region_.get_size(); }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  boost::interprocess::shared_memory_object shm_;
  boost::interprocess::mapped_region region_;
};

}  // namespace stoker::server
