// Unit tier: the job's sealed memfd (daemon/job/shm_segment.hpp). ShmSegment::write puts bytes
// into the segment through its descriptor (a remote.verify pick's pixels, issue #36): what it
// wrote must read back through the mapping, across page boundaries, and a write past the sealed
// end must be refused without growing the segment (Job::put_sample then copies instead).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "job/shm_segment.hpp"

using stoker::job::ShmSegment;

TEST_CASE("a segment written through its descriptor reads back through its mapping, and past its sealed end is refused",
          "[unit][shm]") {
  const std::uint64_t size = 3 * 4096 + 100;
  ShmSegment seg("stoker-shm-segment-test-" + std::to_string(::getpid()), size);
  std::vector<std::uint8_t> bytes(6000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 131 + 7);

  // Across two page boundaries, and the segment's last bytes exactly.
  REQUIRE(seg.write(4000, bytes.data(), bytes.size()));
  CHECK(std::memcmp(seg.base() + 4000, bytes.data(), bytes.size()) == 0);
  CHECK(seg.base()[3999] == 0);
  CHECK(seg.base()[4000 + bytes.size()] == 0);
  REQUIRE(seg.write(size - 50, bytes.data(), 50));
  CHECK(std::memcmp(seg.base() + size - 50, bytes.data(), 50) == 0);

  // Past the end: F_SEAL_GROW refuses the write; the size stays.
  CHECK_FALSE(seg.write(size - 10, bytes.data(), 20));
  struct stat st {};
  REQUIRE(::fstat(seg.fd(), &st) == 0);
  CHECK(static_cast<std::uint64_t>(st.st_size) == size);
}
