// The bytes behind the host simulation of device memory and events: every simulated object
// (an allocation or an interprocess event) is a POSIX shared-memory object that starts with
// SimObjectHeader; an allocation's data follows at kSimDataOffset. Processes that open an
// object register in its opener table, which is how the simulation tells "a live peer still
// has this open" (undefined behaviour under CUDA: abort) from "the peer is gone" (fine).
//
// Processes are named in shared memory by a ProcessTag (pid + start time), never by a bare
// pid: a killed peer's pid is soon a zombie, then reaped, then possibly another process's
// (pid_max is often 32768), and each of those must read as "gone".
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

// A process across pid reuse: its pid in the high 32 bits, the low 32 bits of its start time
// (clock ticks after boot, /proc/PID/stat field 22) below. 0: nobody. A tag whose start bits
// are 0 (start time unreadable) is judged by its pid alone.
using ProcessTag = std::uint64_t;
inline constexpr ProcessTag kTagBeingFilled = ~ProcessTag{0};  // an entry being claimed
inline std::int32_t tag_pid(ProcessTag t) { return static_cast<std::int32_t>(t >> 32); }

struct Opener {
  std::atomic<ProcessTag> owner;    // 0: free entry; kTagBeingFilled: being claimed
  std::atomic<std::int32_t> count;  // open handles held by that process
  std::uint32_t reserved;
};

// A range of an allocation that a peer reads until the work it queued so far completes.
struct ReadLease {
  std::atomic<ProcessTag> owner;  // 0: free entry; kTagBeingFilled: being claimed
  std::atomic<std::uint64_t> begin, end;  // data offsets
};

struct SimObjectHeader {
  std::uint64_t magic;
  std::uint32_t kind;         // ObjectKind
  std::int32_t creator_pid;  // also in the object's name
  std::uint64_t bytes;        // data bytes (memory)
  // Events: records are numbered; `completed` reaches a record's number when the stream that
  // recorded it gets there. A wait captures `recorded` when it is queued.
  std::atomic<std::uint64_t> recorded;
  std::atomic<std::uint64_t> completed;
  std::atomic<ProcessTag> last_recorder;
  ProcessTag creator;         // written before magic
  Opener openers[kMaxOpeners];
  ReadLease leases[kMaxLeases];
};
static_assert(sizeof(SimObjectHeader) <= kSimDataOffset);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(sizeof(Opener) == 16 && sizeof(ReadLease) == 24);

// What IpcHandle holds for a simulated object.
struct SimHandle {
  std::uint32_t magic;  // kHandleMagic
  std::uint32_t kind;   // ObjectKind
  std::uint64_t bytes;
  char name[48];        // shm_open name, NUL-terminated
};
static_assert(sizeof(SimHandle) == sizeof(IpcHandle));

// The tag of running process `pid` (start bits 0 when its start time cannot be read); 0 for
// pid <= 0.
ProcessTag process_tag(std::int32_t pid);
// This process's tag (recomputed after a fork).
ProcessTag self_tag();

// Whether the process `tag` names still runs. A dead peer's handles are closed by definition,
// as the driver closes them when a process exits, so each of these is "gone": an exited
// process not yet reaped (a zombie: its pidfd reads as exited, /proc says Z), a reaped one
// (no pid, no /proc entry), and a pid now held by a process that started at another time.
bool process_alive(ProcessTag tag);

// Removes /dev/shm objects of simulated devices whose creator is gone (a killed stokerd).
void remove_stale_objects();

}  // namespace stoker::device::hostsim
