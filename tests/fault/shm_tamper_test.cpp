// Fault tier: another process of the same user tries to shrink a job's segment and scribbles
// over its header after a consumer attached (issues #13, #15 §3). The consumer computes every address from the geometry it
// copied and checked at attach, so it keeps receiving correct batches; the daemon, which
// never reads its layout back from shared memory, keeps serving.
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon_fixture.hpp"
#include "stoker/proto/layout.hpp"
#include "stoker/proto/names.hpp"
#include "stoker/stoker.hpp"

using namespace stoker::test;

TEST_CASE("garbage written into the segment header after attach crashes no one", "[fault][shm]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec j;
  j.prefetch = 2;
  j.shuffle = false;
  Daemon d(write_config(dir.path(), {j}, 2), socket);
  stoker::ClientOptions o;
  o.socket_path = socket;
  auto owner = std::make_unique<stoker::Client>("demo", 0, o);
  stoker::Client& c = *owner;
  {
    stoker::Batch b = c.next(30000);
    REQUIRE(b.count() == 8);
  }

  // What a stray process of the same user could do: open the daemon's segment through /proc,
  // try to truncate it (refused: sealed) and overwrite the offsets in its header.
  const std::string path = memfd_of(d.pid(), stoker::proto::segment_name(socket, "demo"));
  REQUIRE(!path.empty());
  const int fd = ::open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  CHECK(::ftruncate(fd, 4096) != 0);  // the SIGBUS a shrunk segment would cause cannot happen
  void* base = ::mmap(nullptr, sizeof(stoker::proto::SegmentHeader), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  REQUIRE(base != MAP_FAILED);
  auto* h = static_cast<stoker::proto::SegmentHeader*>(base);
  h->slot_stride = 0x7fffffffffffull;
  h->payload_offset = 0x123456789ull;
  h->labels_offset = ~0ull;
  h->ids_offset = 1ull << 62;
  h->ring_table_offset = ~0ull;

  // The attached consumer reads on, correctly: ids in order (no shuffle), labels match.
  std::int64_t expect = 8;
  for (int i = 0; i < 6; ++i) {
    stoker::Batch b = c.next(30000);
    for (std::uint32_t k = 0; k < b.count(); ++k, ++expect) {
      CHECK(b.ids()[k] == expect % 64);
      CHECK(b.labels()[k] == (expect % 64) / 16);
    }
  }
  // The daemon notices at the next attach and restores the layout: a new consumer works.
  owner.reset();
  stoker::Client late("demo", 0, o);
  CHECK(late.next(30000).count() > 0);
  CHECK(h->slot_stride != 0x7fffffffffffull);  // written back
  CHECK_THAT(d.log(), Catch::Contains("segment's header had been overwritten by another process; restored"));
  ::munmap(base, sizeof(stoker::proto::SegmentHeader));
  std::string out;
  CHECK(run_program({bin("stokerctl"), "status", "--socket", socket}, out) == 0);  // daemon alive
}
