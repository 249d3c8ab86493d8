// Owner of one job's shared-memory segment: a memfd sealed against shrinking and growing,
// handed to each consumer over the control socket (SCM_RIGHTS with the Welcome).
//
// Why a sealed memfd rather than a named /dev/shm object: a named object can be truncated by
// any process of the same user, and the daemon writing a batch into the lost pages dies of
// SIGBUS, taking every job on the node with it. F_SEAL_SHRINK | F_SEAL_GROW (then F_SEAL_SEAL)
// make the size permanent for everyone, the daemon included; no name means nobody can open it
// without being handed the descriptor (a consumer that passed the handshake). The segment
// disappears with its last descriptor and mapping, so a killed daemon leaves nothing behind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace stoker::job {

class ShmSegment {
 public:
  // `name` shows in /proc/PID/fd and maps ("memfd:NAME"). Throws std::runtime_error with the
  // name, size and a hint when memory cannot be reserved.
  ShmSegment(std::string name, std::uint64_t size);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  std::uint8_t* base() const { return base_; }
  std::uint64_t size() const { return size_; }
  const std::string& name() const { return name_; }
  int fd() const { return fd_; }  // sent to consumers; stays open for the segment's life

  // Writes `n` bytes at `offset` through the descriptor (the kernel copies them into the pages),
  // not through this process's mapping; the bytes are the same either way. false, with nothing
  // promised of the range, when the kernel refuses (the caller writes through base() instead).
  // Why: a slot the daemon's own threads never touch (its pixels received by the kernel from a
  // remote worker) costs a user-mode pass ~6 µs a page on shadow-paging hypervisors (measured on
  // the 2-core sandbox: 223-256 µs for a 147 KiB sample, ~50 µs through here; PERFORMANCE.md,
  // "A verify pick's write"). Requires offset + n <= size().
  bool write(std::uint64_t offset, const std::uint8_t* from, std::size_t n) const;

 private:
  std::string name_;
  int fd_ = -1;
  std::uint8_t* base_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace stoker::job
