// A strict emulation of the slice of the CUDA driver API that Stoker resolves
// (device/cuda_driver_api.cpp), built as libcuda.so.1 into <build>/cuda_emu so that
// LD_LIBRARY_PATH=<build>/cuda_emu runs the real `cuda` backend in stokerd and in libstoker
// without a GPU. Test-only: never installed.
//
// The model, and where it is strict (see docs/GPU.md for what only a real GPU can show):
//  - Nothing works before cuInit (CUDA_ERROR_NOT_INITIALIZED); calls that need a context use
//    the calling thread's own context stack and fail with CUDA_ERROR_INVALID_CONTEXT when it is
//    empty; a thread that ends with a context still pushed aborts (unbalanced push; the
//    main thread is not checked at exit).
//  - Device memory is a POSIX shared-memory object per allocation. The device pointer handed
//    out is a PROT_NONE reservation the host cannot dereference (a host read or write of it is
//    SIGSEGV, as on a GPU); only the emulation's streams touch the bytes, through a second,
//    writable mapping of the same object (the "alias").
//  - Streams are threads; each operation runs later, after a random delay, so a missing wait
//    shows as wrong pixels. Events are counters in shared memory (interprocess events are
//    their own shared-memory objects), so ordering across processes is on the "device".
//  - Loud where CUDA is undefined: freeing memory or destroying an event that a live peer
//    still has open, using a destroyed stream or event, closing a handle that is not open, a
//    kernel reading or writing outside device memory: each aborts with the call's name.
//  - Kernels: cuModuleLoadData accepts a fatbin, cubin or PTX image without running it and
//    finds the kernel names in it; cuLaunchKernel runs the CPU twin of a known kernel, reading
//    the argument array by the kernel's real signature.
//  - Live objects are counted per process in a shared-memory page (<pid>-stats, see
//    cuemu_stats.h) that tests read while the process runs; STOKER_CUDA_EMU_REPORT=DIR writes
//    DIR/cuemu-<pid>.txt with the counts at exit.
// Environment: STOKER_CUDA_EMU_DEVICES (a count, default 1, or GPU UUIDs in this process's
// order), STOKER_CUDA_EMU_DELAY_US (the most a stream operation waits before it runs, default
// 300), STOKER_CUDA_EMU_COMPUTE_MODE (attribute value for every device), STOKER_CUDA_EMU_REPORT.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "cuemu_stats.h"

namespace cuemu {

// --- the ABI (cuda.h's values; the emulation must not include cuda.h) -----------------------
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct Context;
struct Stream;
struct Event;
struct Module;
struct Function;
using CUcontext = Context*;
using CUstream = Stream*;
using CUevent = Event*;
using CUmodule = Module*;
using CUfunction = Function*;
struct CUuuid { char bytes[16]; };
struct CUipcMemHandle { char reserved[64]; };
struct CUipcEventHandle { char reserved[64]; };

enum : CUresult {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_MAP_FAILED = 205,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
  CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
};
inline constexpr int kAttrComputeMode = 20;
inline constexpr int kAttrUnifiedAddressing = 41;
inline constexpr int kAttrReadOnlyHostRegister = 113;
inline constexpr int kAttrIpcEventSupported = 125;
inline constexpr unsigned kStreamNonBlocking = 0x1;
inline constexpr unsigned kEventDisableTiming = 0x2;
inline constexpr unsigned kEventInterprocess = 0x4;
inline constexpr unsigned kHostRegisterPortable = 0x01;
inline constexpr unsigned kHostRegisterReadOnly = 0x08;
inline constexpr unsigned kIpcLazyPeerAccess = 0x1;

// --- shared-memory objects ------------------------------------------------------------------
// Every allocation and interprocess event is /dev/shm/stoker-cuemu-<creator pid>-<n>; its first
// page is an ObjectHeader, an allocation's bytes follow. The names carry the creator's pid so
// that objects of a dead process are reclaimed (as the driver frees a dead process's memory):
// cuInit unlinks those of processes that are gone.
inline constexpr std::uint64_t kMemMagic = 0x4d454d554d4543ull;  // "CEMUMEM"
inline constexpr std::uint64_t kEventMagic = 0x5645554d4543ull;  // "CEMUEV"
inline constexpr std::size_t kHeaderBytes = 4096;
inline constexpr int kMaxOpeners = 64;

struct Opener {
  std::atomic<std::int32_t> pid;    // 0: free slot
  std::atomic<std::int32_t> count;  // open handles of that process
};
struct ObjectHeader {
  std::uint64_t magic;
  std::int32_t creator;
  std::int32_t device;
  std::uint64_t bytes;
  // Events: records issued and completed (a record's number is its position); the pid that
  // issued the latest record, so a wait on a record whose process died is released (the driver
  // tears down a dead process's queued work).
  std::atomic<std::uint64_t> recorded;
  std::atomic<std::uint64_t> completed;
  std::atomic<std::int32_t> recorder;
  Opener openers[kMaxOpeners];
};
static_assert(sizeof(ObjectHeader) <= kHeaderBytes);

// The handle bytes (64, as cuda.h's): which object and who made it.
struct HandleBytes {
  std::uint64_t magic;
  std::int32_t creator;
  std::int32_t device;
  std::uint64_t bytes;
  char name[40];
};
static_assert(sizeof(HandleBytes) == 64);

// A mapped shared object; the mapping lives as long as the last holder (a queued operation
// keeps what it touches).
struct Shared {
  std::string name;
  ObjectHeader* header = nullptr;
  unsigned char* data = nullptr;  // the writable alias of the bytes (allocations)
  std::size_t map_bytes = 0;  // 0: a process-local event's header, on the heap
  ~Shared();
};
std::shared_ptr<Shared> create_shared(std::uint64_t magic, int device, std::size_t bytes, std::string& name);
std::shared_ptr<Shared> open_shared(const HandleBytes& h);
void add_opener(ObjectHeader& h, int delta);
// The first live process other than this one that has `h` open, or 0.
int live_opener(const ObjectHeader& h);
bool process_alive(int pid);
std::string process_state(int pid);  // /proc/PID/stat, for messages

// --- process state ----------------------------------------------------------------------------
[[noreturn]] void fail(const char* call, const std::string& what);
bool initialized();
int device_count();
void device_uuid(int device, unsigned char out[16]);
Context* current_context();  // top of the calling thread's stack, or nullptr
int context_device(const Context* c);
bool context_alive(const Context* c);
Stats& stats();
std::uint64_t random_delay_us();

// Device memory of this process: a base address -> its alias, for allocations and opened IPC
// mappings. Resolves [p, p + n) inside one range, or nullptr.
struct DeviceRange {
  unsigned char* alias;
  std::shared_ptr<Shared> object;
  int device;
};
bool resolve(CUdeviceptr p, std::size_t n, DeviceRange& out);
// Whether a context is current; else the call fails with CUDA_ERROR_INVALID_CONTEXT.
CUresult need_context();

// Streams (emu_streams.cpp): work queued on a stream, the null stream of a context included.
using Work = std::function<void()>;
bool enqueue(const char* call, CUstream s, Work w);  // false: stream invalid (fails the call)
void stream_sync(const char* call, CUstream s);

}  // namespace cuemu

// Entry points, as cuda.h exports them.
#define CUEMU_API extern "C" __attribute__((visibility("default")))
