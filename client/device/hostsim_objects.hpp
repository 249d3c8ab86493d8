// The bytes behind the host simulation of device memory and events: every simulated object
// (an allocation or an interprocess event) is a POSIX shared-memory object that starts with
// SimObjectHeader; an allocation's data follows at kSimDataOffset. Processes that open an
// object register in its opener table, which is how the simulation tells "a live peer still
// has this open" (undefined behaviour under CUDA: abort) from "the peer is gone" (fine).
//
// Everything here is read and written by more than one process: fixed-width fields and
// lock-free atomics only, no pointers.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "device/device_backend.hpp"

namespace stoker::device::hostsim {

inline constexpr std::uint64_t kSimMagic = 0x314d49534b4f5453ull;  // "STOKSIM1"
inline constexpr std::uint32_t kHandleMagic = 0x4d495348u;         // "HSIM"
inline constexpr std::size_t kSimDataOffset = 4096;
inline constexpr int kMaxOpeners = 64;
inline constexpr int kMaxLeases = 96;

enum class ObjectKind : std::uint32_t { kMemory = 1, kEvent = 2 };

struct Opener {
  std::atomic<std::int32_t> pid;    // 0: free entry
  std::atomic<std::int32_t> count;  // open handles held by that process
};

// A range of an allocation that a peer reads until the work it queued so far completes.
struct ReadLease {
  std::atomic<std::int32_t> pid;  // 0: free entry
  std::uint32_t reserved;
  std::atomic<std::uint64_t> begin, end;  // data offsets
};

struct SimObjectHeader {
  std::uint64_t magic;
  std::uint32_t kind;         // ObjectKind
  std::int32_t creator_pid;
  std::uint64_t bytes;        // data bytes (memory)
  // Events: records are numbered; `completed` reaches a record's number when the stream that
  // recorded it gets there. A wait captures `recorded` when it is queued.
  std::atomic<std::uint64_t> recorded;
  std::atomic<std::uint64_t> completed;
  std::atomic<std::int32_t> last_recorder_pid;
  std::uint32_t reserved;
  Opener openers[kMaxOpeners];
  ReadLease leases[kMaxLeases];
};
static_assert(sizeof(SimObjectHeader) <= kSimDataOffset);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

// What IpcHandle holds for a simulated object.
struct SimHandle {
  std::uint32_t magic;  // kHandleMagic
  std::uint32_t kind;   // ObjectKind
  std::uint64_t bytes;
  char name[48];        // shm_open name, NUL-terminated
};
static_assert(sizeof(SimHandle) == sizeof(IpcHandle));

// Whether process `pid` still exists (kill(pid, 0)); a dead peer's handles are closed by
// definition, as the driver closes them when a process exits.
bool process_alive(std::int32_t pid);

// Removes /dev/shm objects of simulated devices whose creator is gone (a killed stokerd).
void remove_stale_objects();

}  // namespace stoker::device::hostsim
