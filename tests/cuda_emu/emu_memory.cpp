// Device memory: allocations, IPC memory handles, page-locked host ranges, copies.
//
// A device pointer is the start of a PROT_NONE reservation (plus a guard page), so the host
// cannot read or write it; the bytes live in a shared-memory object that only stream work
// touches through its writable alias. Invariant: every live allocation or opened IPC mapping
// of this process has exactly one entry in ranges(), keyed by its device address.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "emu.hpp"

namespace cuemu {
namespace {

constexpr std::uint64_t kTotalBytes = 16ull << 30;  // what cuMemGetInfo reports per device

struct Range {
  std::size_t bytes;
  DeviceRange target;
  bool imported;     // an opened IPC mapping (closed by cuIpcCloseMemHandle), not an allocation
  int open_count;    // imported: cuIpcOpenMemHandle calls not yet closed
  std::size_t reserved;
};
struct Memory {
  std::mutex mu;
  std::map<CUdeviceptr, Range> ranges;
  std::map<std::uintptr_t, std::size_t> registered;  // host ranges: start -> bytes
};
Memory& mem() {
  static Memory* m = new Memory;  // never destroyed (stream threads outlive static destructors)
  return *m;
}

std::size_t page() { return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)); }

// An address range the host cannot touch, with a guard page after it.
CUdeviceptr reserve(std::size_t bytes, std::size_t& reserved) {
  reserved = (bytes + page() - 1) / page() * page() + page();
  void* p = ::mmap(nullptr, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? 0 : reinterpret_cast<CUdeviceptr>(p);
}

// Whether [p, p + n) is mapped in this process, and writable where `writable` is asked.
bool host_range_mapped(std::uintptr_t p, std::size_t n, bool writable) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  std::uintptr_t at = p;
  const std::uintptr_t end = p + n;
  std::map<std::uintptr_t, std::pair<std::uintptr_t, bool>> areas;
  while (std::getline(maps, line)) {
    unsigned long lo = 0, hi = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
    areas[lo] = {hi, perms[0] == 'r' && (!writable || perms[1] == 'w')};
  }
  while (at < end) {
    auto it = areas.upper_bound(at);
    if (it == areas.begin()) return false;
    --it;
    if (it->second.first <= at || !it->second.second) return false;
    at = it->second.first;
  }
  return true;
}

}  // namespace

bool resolve(CUdeviceptr p, std::size_t n, DeviceRange& out) {
  std::lock_guard lock(mem().mu);
  auto& r = mem().ranges;
  auto it = r.upper_bound(p);
  if (it == r.begin()) return false;
  --it;
  if (p - it->first > it->second.bytes || n > it->second.bytes - (p - it->first)) return false;
  out = it->second.target;
  out.alias += p - it->first;
  return true;
}

}  // namespace cuemu

using namespace cuemu;

namespace {

// The bytes of device range `r` (resolved above) for a stream operation.
struct Bytes {
  unsigned char* at;
  std::shared_ptr<Shared> keep;  // the object stays mapped until the operation ran
};

CUresult device_bytes(CUdeviceptr p, std::size_t n, Bytes& out) {
  DeviceRange r;
  if (!resolve(p, n, r)) return CUDA_ERROR_INVALID_VALUE;
  out = {r.alias, r.object};
  return CUDA_SUCCESS;
}

}  // namespace

CUEMU_API CUresult cuMemAlloc_v2(CUdeviceptr* out, std::size_t bytes) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const int device = context_device(current_context());
  std::string name;
  auto obj = create_shared(kMemMagic, device, bytes, name);
  if (obj == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  std::size_t reserved = 0;
  const CUdeviceptr p = reserve(bytes, reserved);
  if (p == 0) {
    ::shm_unlink(name.c_str());
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  {
    std::lock_guard lock(mem().mu);
    mem().ranges[p] = Range{bytes, DeviceRange{obj->data, obj, device}, false, 0, reserved};
  }
  ++stats().allocations;
  stats().allocated_bytes += static_cast<std::int64_t>(bytes);
  *out = p;
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuMemFree_v2(CUdeviceptr p) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (p == 0) return CUDA_SUCCESS;
  Range gone;
  {
    std::lock_guard lock(mem().mu);
    auto it = mem().ranges.find(p);
    if (it == mem().ranges.end() || it->second.imported) {
      char what[160];
      std::snprintf(what, sizeof what, "0x%llx is not an allocation of this process (freed twice, an offset, or an "
                                       "IPC mapping, which cuIpcCloseMemHandle closes)", p);
      fail("cuMemFree", what);
    }
    if (const int peer = live_opener(*it->second.target.object->header)) {
      fail("cuMemFree", "process " + std::to_string(peer) +
                            " still has this allocation open through cuIpcOpenMemHandle (free only after the "
                            "peer closed it or is gone)");
    }
    gone = it->second;
    mem().ranges.erase(it);
  }
  ::shm_unlink(gone.target.object->name.c_str());
  ::munmap(reinterpret_cast<void*>(p), gone.reserved);
  --stats().allocations;
  stats().allocated_bytes -= static_cast<std::int64_t>(gone.bytes);
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuMemGetInfo_v2(std::size_t* free_bytes, std::size_t* total) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (free_bytes == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *total = kTotalBytes;
  *free_bytes = kTotalBytes - static_cast<std::uint64_t>(stats().allocated_bytes.load());
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuIpcGetMemHandle(CUipcMemHandle* h, CUdeviceptr p) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (h == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mem().mu);
  auto it = mem().ranges.find(p);
  if (it == mem().ranges.end() || it->second.imported) return CUDA_ERROR_INVALID_VALUE;
  HandleBytes b{};
  const Shared& o = *it->second.target.object;
  b.magic = kMemMagic;
  b.creator = o.header->creator;
  b.device = o.header->device;
  b.bytes = o.header->bytes;
  std::snprintf(b.name, sizeof b.name, "%s", o.name.c_str());
  std::memcpy(h->reserved, &b, sizeof b);
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* out, CUipcMemHandle h, unsigned flags) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || flags != kIpcLazyPeerAccess) return CUDA_ERROR_INVALID_VALUE;
  HandleBytes b;
  std::memcpy(&b, h.reserved, sizeof b);
  if (b.magic != kMemMagic || b.name[sizeof b.name - 1] != '\0') return CUDA_ERROR_INVALID_HANDLE;
  // Handles open only in other processes; in the exporting one the driver reports an invalid
  // context ("may only be opened by one context per device per other process").
  if (b.creator == ::getpid()) return CUDA_ERROR_INVALID_CONTEXT;
  const int device = context_device(current_context());
  {
    std::lock_guard lock(mem().mu);
    for (auto& [p, r] : mem().ranges) {
      if (r.imported && r.target.object->name == b.name && r.target.device == device) {
        ++r.open_count;  // opened again by this context: same pointer, one more reference
        *out = p;
        return CUDA_SUCCESS;
      }
    }
  }
  auto obj = open_shared(b);
  if (obj == nullptr) return CUDA_ERROR_INVALID_HANDLE;  // freed, or its process is gone
  std::size_t reserved = 0;
  const CUdeviceptr p = reserve(b.bytes, reserved);
  if (p == 0) return CUDA_ERROR_MAP_FAILED;
  add_opener(*obj->header, +1);
  {
    std::lock_guard lock(mem().mu);
    mem().ranges[p] = Range{b.bytes, DeviceRange{obj->data, obj, device}, true, 1, reserved};
  }
  ++stats().ipc_mem_opened;
  *out = p;
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  Range gone;
  {
    std::lock_guard lock(mem().mu);
    auto it = mem().ranges.find(p);
    if (it == mem().ranges.end() || !it->second.imported) {
      char what[120];
      std::snprintf(what, sizeof what, "0x%llx is not an open IPC mapping of this process (closed twice?)", p);
      fail("cuIpcCloseMemHandle", what);
    }
    if (--it->second.open_count > 0) return CUDA_SUCCESS;
    gone = it->second;
    mem().ranges.erase(it);
  }
  add_opener(*gone.target.object->header, -1);
  ::munmap(reinterpret_cast<void*>(p), gone.reserved);
  --stats().ipc_mem_opened;
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuMemHostRegister_v2(void* p, std::size_t bytes, unsigned flags) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (p == nullptr || bytes == 0 || (flags & ~0xfu) != 0) return CUDA_ERROR_INVALID_VALUE;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  {
    std::lock_guard lock(mem().mu);
    for (auto& [start, n] : mem().registered) {
      if (at < start + n && start < at + bytes) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
  }
  // Pinning takes write access unless CU_MEMHOSTREGISTER_READ_ONLY says the device only reads.
  if (!host_range_mapped(at, bytes, (flags & kHostRegisterReadOnly) == 0)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mem().mu);
  mem().registered[at] = bytes;
  ++stats().host_registered;
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuMemHostUnregister(void* p) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(mem().mu);
  if (mem().registered.erase(reinterpret_cast<std::uintptr_t>(p)) == 0) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  --stats().host_registered;
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, std::size_t n, CUstream s) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  Bytes d;
  if (src == nullptr || device_bytes(dst, n, d) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  // The host bytes are read when the copy runs, not now: a caller that rewrites them before
  // the stream reached the copy gets its new bytes on the device, as with a real DMA.
  return enqueue("cuMemcpyHtoDAsync", s, [d, src, n] { std::memcpy(d.at, src, n); }) ? CUDA_SUCCESS
                                                                                     : CUDA_ERROR_INVALID_HANDLE;
}

CUEMU_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, std::size_t n) {
  if (CUresult r = cuMemcpyHtoDAsync_v2(dst, src, n, nullptr); r != CUDA_SUCCESS) return r;
  stream_sync("cuMemcpyHtoD", nullptr);  // synchronous: on the null stream, returns when done
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, std::size_t n, CUstream s) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  Bytes b;
  if (dst == nullptr || device_bytes(src, n, b) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  return enqueue("cuMemcpyDtoHAsync", s, [b, dst, n] { std::memcpy(dst, b.at, n); }) ? CUDA_SUCCESS
                                                                                    : CUDA_ERROR_INVALID_HANDLE;
}

CUEMU_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, std::size_t n, CUstream s) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  Bytes d, b;
  if (device_bytes(dst, n, d) != CUDA_SUCCESS || device_bytes(src, n, b) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  return enqueue("cuMemcpyDtoDAsync", s, [d, b, n] { std::memmove(d.at, b.at, n); }) ? CUDA_SUCCESS
                                                                                    : CUDA_ERROR_INVALID_HANDLE;
}
