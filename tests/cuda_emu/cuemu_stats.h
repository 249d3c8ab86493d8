// The live-object counts of one process using the CUDA emulation (libcuda.so.1 from
// <build>/cuda_emu), kept in a shared-memory page /dev/shm/stoker-cuemu-<pid>-stats that the
// process updates as it goes, so a test reads another process's counts while it runs
// (cuemu_read_stats). The page is removed at a clean exit (after STOKER_CUDA_EMU_REPORT's file
// is written) and by the next cuInit anywhere once the process is gone.
#pragma once

#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace cuemu {

struct Stats {
  std::uint64_t magic;             // kStatsMagic once the page is initialised
  std::atomic<std::int64_t> allocations;      // cuMemAlloc not yet freed
  std::atomic<std::int64_t> allocated_bytes;
  std::atomic<std::int64_t> events;           // cuEventCreate not yet destroyed
  std::atomic<std::int64_t> ipc_events_opened;  // cuIpcOpenEventHandle not yet destroyed
  std::atomic<std::int64_t> ipc_mem_opened;   // cuIpcOpenMemHandle not yet closed (by refcount)
  std::atomic<std::int64_t> streams;          // cuStreamCreate not yet destroyed
  std::atomic<std::int64_t> modules;
  std::atomic<std::int64_t> host_registered;  // cuMemHostRegister ranges
  std::atomic<std::int64_t> primary_retained[8];  // cuDevicePrimaryCtxRetain - Release, per device
  std::atomic<std::int64_t> launches;         // kernels run (a total, not a live count)
  std::atomic<std::int64_t> pushed;           // contexts pushed and not popped, all threads
};
inline constexpr std::uint64_t kStatsMagic = 0x5354415453554d45ull;

inline void stats_name(int pid, char* out, std::size_t n) {
  snprintf(out, n, "/stoker-cuemu-%d-stats", pid);
}

// A copy of process `pid`'s counts; false when it has none (never called cuInit, or gone).
inline bool cuemu_read_stats(int pid, Stats& out) {
  char name[64];
  stats_name(pid, name, sizeof name);
  const int fd = ::shm_open(name, O_RDONLY, 0);
  if (fd < 0) return false;
  void* p = ::mmap(nullptr, sizeof(Stats), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return false;
  const auto* s = static_cast<const Stats*>(p);
  const bool ok = s->magic == kStatsMagic;
  if (ok) {
    out.magic = s->magic;
    out.allocations = s->allocations.load();
    out.allocated_bytes = s->allocated_bytes.load();
    out.events = s->events.load();
    out.ipc_events_opened = s->ipc_events_opened.load();
    out.ipc_mem_opened = s->ipc_mem_opened.load();
    out.streams = s->streams.load();
    out.modules = s->modules.load();
    out.host_registered = s->host_registered.load();
    for (int i = 0; i < 8; ++i) out.primary_retained[i] = s->primary_retained[i].load();
    out.launches = s->launches.load();
    out.pushed = s->pushed.load();
  }
  ::munmap(p, sizeof(Stats));
  return ok;
}

}  // namespace cuemu
