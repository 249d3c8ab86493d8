// The emulation's process state: cuInit, the device list, primary contexts and the per-thread
// context stack, error names, shared-memory objects, live-object counts.
#include <dirent.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "emu.hpp"

namespace cuemu {

struct Context {
  int device;
  std::atomic<int> retained{0};  // primary context retains; 0: inactive
};

namespace {

// Process-wide state, never destroyed: stream threads may still run while the process exits.
struct Process {
  std::mutex mu;
  bool initialized = false;
  std::vector<std::array<unsigned char, 16>> uuids;
  std::vector<Context*> primary;  // one per device, created at cuInit
  Stats* stats = nullptr;
  std::atomic<std::uint64_t> next_object{0};
  std::uint64_t max_delay_us = 300;
  int compute_mode = 0;
};
Process& proc() {
  static Process* p = new Process;
  return *p;
}

// The calling thread's context stack, in a pthread key rather than thread_local: TLS of a
// dlopen()ed library lives in dynamic TLS blocks, which LeakSanitizer's exit-time scan of this
// GCC/glibc pair crashes on ("Tracer caught signal 11"). A thread that ends with a context
// still pushed left a stray context current (an unbalanced cuCtxPushCurrent): loud.
using ContextStack = std::vector<Context*>;
void check_thread_end(void* p) {
  auto* stack = static_cast<ContextStack*>(p);
  const std::size_t left = stack->size();
  delete stack;
  if (left != 0) {
    fail("cuCtxPushCurrent", "a thread ended with " + std::to_string(left) +
                                 " context(s) still pushed (a push without its pop)");
  }
}
pthread_key_t stack_key() {
  static const pthread_key_t key = [] {
    pthread_key_t k;
    ::pthread_key_create(&k, check_thread_end);
    return k;
  }();
  return key;
}
ContextStack& thread_stack() {
  auto* s = static_cast<ContextStack*>(::pthread_getspecific(stack_key()));
  if (s == nullptr) {
    s = new ContextStack;
    ::pthread_setspecific(stack_key(), s);
  }
  return *s;
}

bool parse_uuid(const std::string& t, std::array<unsigned char, 16>& out) {
  std::string hex;
  for (std::size_t i = t.rfind("GPU-", 0) == 0 ? 4 : 0; i < t.size(); ++i) {
    if (t[i] == '-') continue;
    if (!std::isxdigit(static_cast<unsigned char>(t[i]))) return false;
    hex += t[i];
  }
  if (hex.size() != 32) return false;
  for (int b = 0; b < 16; ++b) out[b] = static_cast<unsigned char>(std::stoul(hex.substr(2 * b, 2), nullptr, 16));
  return true;
}

// STOKER_CUDA_EMU_DEVICES: a count (default 1) or comma-separated UUIDs. Device n of a count
// has UUID GPU-c0da0e30-0000-0000-0000-00000000000n in every process (so processes agree).
bool read_devices(std::vector<std::array<unsigned char, 16>>& out) {
  const char* v = std::getenv("STOKER_CUDA_EMU_DEVICES");
  const std::string s = v != nullptr && *v != '\0' ? v : "1";
  if (s.find('-') == std::string::npos) {
    char* end = nullptr;
    const long n = std::strtol(s.c_str(), &end, 10);
    if (*end != '\0' || n < 0 || n > 8) return false;
    for (long i = 0; i < n; ++i) {
      std::array<unsigned char, 16> u{0xc0, 0xda, 0x0e, 0x30};
      u[15] = static_cast<unsigned char>(i);
      out.push_back(u);
    }
    return true;
  }
  std::size_t at = 0;
  while (at <= s.size()) {
    const std::size_t comma = std::min(s.find(',', at), s.size());
    std::array<unsigned char, 16> u{};
    if (!parse_uuid(s.substr(at, comma - at), u) || out.size() == 8) return false;
    out.push_back(u);
    at = comma + 1;
  }
  return true;
}

// The driver frees a dead process's device memory: objects (and stats pages) whose creator is
// gone are unlinked. Peers that still map them keep their mapping.
void reclaim_dead() {
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    int pid = 0;
    if (std::sscanf(e->d_name, "stoker-cuemu-%d-", &pid) == 1 && pid > 0 && !process_alive(pid)) {
      ::shm_unlink((std::string("/") + e->d_name).c_str());
    }
  }
  ::closedir(d);
}

void write_report() {
  Stats& s = stats();
  if (const char* dir = std::getenv("STOKER_CUDA_EMU_REPORT"); dir != nullptr && *dir != '\0') {
    const std::string path = std::string(dir) + "/cuemu-" + std::to_string(::getpid()) + ".txt";
    if (FILE* f = std::fopen(path.c_str(), "w")) {
      std::fprintf(f, "allocations %lld\nallocated_bytes %lld\nevents %lld\nipc_events_opened %lld\n"
                      "ipc_mem_opened %lld\nstreams %lld\nmodules %lld\nhost_registered %lld\nlaunches %lld\n",
                   (long long)s.allocations, (long long)s.allocated_bytes, (long long)s.events,
                   (long long)s.ipc_events_opened, (long long)s.ipc_mem_opened, (long long)s.streams,
                   (long long)s.modules, (long long)s.host_registered, (long long)s.launches);
      for (int i = 0; i < 8; ++i) std::fprintf(f, "primary_retained_%d %lld\n", i, (long long)s.primary_retained[i]);
      std::fclose(f);
    }
  }
  char name[64];
  stats_name(::getpid(), name, sizeof name);
  ::shm_unlink(name);
}

}  // namespace

std::string process_state(int pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return "gone";
  char buf[512];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  return buf;
}

[[noreturn]] void fail(const char* call, const std::string& what) {
  std::fprintf(stderr, "cuda-emu: %s: %s (pid %d; undefined behaviour on a real GPU)\n", call, what.c_str(), ::getpid());
  std::fflush(stderr);
  std::abort();
}

// A process counts as gone once it is exiting (PF_EXITING) or a zombie: by then its memory
// and its descriptors, the driver's included, are being torn down, which releases its IPC
// mappings; a peer learns of the death (its socket closing) in that window, before any wait.
bool process_alive(int pid) {
  if (pid <= 0) return false;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  // Unreadable: gone, or being reaped (ENOENT, ESRCH, an empty read); only a permission
  // error leaves the question to kill(0).
  if (f == nullptr) return errno == EACCES && ::kill(pid, 0) == 0;
  char buf[512];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* after_name = std::strrchr(buf, ')');  // the command name may hold spaces
  char state = '?';
  int ppid = 0, pgrp = 0, session = 0, tty = 0, tpgid = 0;
  unsigned long flags = 0;
  if (after_name == nullptr ||
      std::sscanf(after_name + 1, " %c %d %d %d %d %d %lu", &state, &ppid, &pgrp, &session, &tty, &tpgid, &flags) != 7) {
    return false;
  }
  constexpr unsigned long kPfExiting = 0x4;
  return state != 'Z' && state != 'X' && (flags & kPfExiting) == 0;
}

bool initialized() {
  std::lock_guard lock(proc().mu);
  return proc().initialized;
}
int device_count() { return static_cast<int>(proc().uuids.size()); }
void device_uuid(int device, unsigned char out[16]) { std::memcpy(out, proc().uuids.at(device).data(), 16); }
Context* current_context() {
  const ContextStack& s = thread_stack();
  return s.empty() ? nullptr : s.back();
}
int context_device(const Context* c) { return c->device; }
bool context_alive(const Context* c) { return c->retained.load() > 0; }
Stats& stats() {
  static Stats dummy{};  // before cuInit nothing is counted
  return proc().stats != nullptr ? *proc().stats : dummy;
}
std::uint64_t random_delay_us() {
  // splitmix64 over one shared counter (no thread_local, see thread_stack()).
  static std::atomic<std::uint64_t> state{std::random_device{}() * 0x9e3779b97f4a7c15ull + 1};
  std::uint64_t z = state.fetch_add(0x9e3779b97f4a7c15ull) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const std::uint64_t m = proc().max_delay_us;
  return m == 0 ? 0 : z % (m + 1);
}

// --- shared objects -------------------------------------------------------------------------
Shared::~Shared() {
  if (header != nullptr && map_bytes == 0) delete header;
  if (header != nullptr && map_bytes != 0) ::munmap(header, map_bytes);
}

CUresult need_context() {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  Context* c = current_context();
  return c != nullptr && context_alive(c) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

std::shared_ptr<Shared> create_shared(std::uint64_t magic, int device, std::size_t bytes, std::string& name) {
  name = "/stoker-cuemu-" + std::to_string(::getpid()) + "-" + std::to_string(proc().next_object++);
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return nullptr;
  auto s = std::make_shared<Shared>();
  s->name = name;
  s->map_bytes = kHeaderBytes + bytes;
  void* p = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(s->map_bytes)) == 0) {
    p = ::mmap(nullptr, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  ::close(fd);
  if (p == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    return nullptr;
  }
  s->header = new (p) ObjectHeader{};
  s->header->magic = magic;
  s->header->creator = ::getpid();
  s->header->device = device;
  s->header->bytes = bytes;
  s->data = static_cast<unsigned char*>(p) + kHeaderBytes;
  return s;
}

std::shared_ptr<Shared> open_shared(const HandleBytes& h) {
  char name[sizeof h.name + 1] = {};
  std::memcpy(name, h.name, sizeof h.name);
  const int fd = ::shm_open(name, O_RDWR, 0);
  if (fd < 0) return nullptr;
  struct stat st{};
  auto s = std::make_shared<Shared>();
  s->name = name;
  void* p = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) == kHeaderBytes + h.bytes) {
    s->map_bytes = static_cast<std::size_t>(st.st_size);
    p = ::mmap(nullptr, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  ::close(fd);
  if (p == MAP_FAILED) return nullptr;
  s->header = static_cast<ObjectHeader*>(p);
  s->data = static_cast<unsigned char*>(p) + kHeaderBytes;
  if (s->header->magic != h.magic || s->header->creator != h.creator) return nullptr;
  return s;
}

void add_opener(ObjectHeader& h, int delta) {
  const int me = ::getpid();
  for (Opener& o : h.openers) {
    int pid = o.pid.load();
    if (pid == me) {
      o.count += delta;
      return;
    }
  }
  for (Opener& o : h.openers) {
    int expected = 0;
    // A slot of a dead process is reused (the driver released its mappings).
    int pid = o.pid.load();
    if (pid != 0 && !process_alive(pid)) {
      if (o.pid.compare_exchange_strong(pid, 0)) o.count = 0;
    }
    if (o.pid.compare_exchange_strong(expected, me)) {
      o.count = delta;
      return;
    }
  }
  fail("cuIpcOpen*Handle", "more than 64 processes opened one object");
}

int live_opener(const ObjectHeader& h) {
  for (const Opener& o : h.openers) {
    const int pid = o.pid.load();
    if (pid != 0 && pid != ::getpid() && o.count.load() > 0 && process_alive(pid)) return pid;
  }
  return 0;
}

}  // namespace cuemu

using namespace cuemu;

namespace {
bool need_init() { return !initialized(); }
// cuGetErrorString's texts (the driver's wording).
const char* error_string(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return "no error";
    case CUDA_ERROR_INVALID_VALUE: return "invalid argument";
    case CUDA_ERROR_OUT_OF_MEMORY: return "out of memory";
    case CUDA_ERROR_NOT_INITIALIZED: return "initialization error";
    case CUDA_ERROR_NO_DEVICE: return "no CUDA-capable device is detected";
    case CUDA_ERROR_INVALID_DEVICE: return "invalid device ordinal";
    case CUDA_ERROR_INVALID_IMAGE: return "device kernel image is invalid";
    case CUDA_ERROR_INVALID_CONTEXT: return "invalid device context";
    case CUDA_ERROR_MAP_FAILED: return "mapping of buffer object failed";
    case CUDA_ERROR_INVALID_HANDLE: return "invalid resource handle";
    case CUDA_ERROR_NOT_FOUND: return "named symbol not found";
    case CUDA_ERROR_NOT_READY: return "device not ready";
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: return "part or all of the requested memory range is already mapped";
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: return "pointer does not correspond to a registered memory region";
  }
  return nullptr;
}
bool valid_device(CUdevice d) { return d >= 0 && d < device_count(); }
}  // namespace

CUEMU_API CUresult cuInit(unsigned flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Process& p = proc();
  std::lock_guard lock(p.mu);
  if (p.initialized) return CUDA_SUCCESS;
  if (!read_devices(p.uuids)) {
    std::fprintf(stderr, "cuda-emu: STOKER_CUDA_EMU_DEVICES='%s' is not a count (0..8) or a list of GPU UUIDs\n",
                 std::getenv("STOKER_CUDA_EMU_DEVICES"));
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (const char* v = std::getenv("STOKER_CUDA_EMU_DELAY_US")) p.max_delay_us = std::strtoull(v, nullptr, 10);
  if (const char* v = std::getenv("STOKER_CUDA_EMU_COMPUTE_MODE")) p.compute_mode = std::atoi(v);
  reclaim_dead();
  char name[64];
  stats_name(::getpid(), name, sizeof name);
  const int fd = ::shm_open(name, O_RDWR | O_CREAT | O_TRUNC, 0600);
  void* m = MAP_FAILED;
  if (fd >= 0 && ::ftruncate(fd, sizeof(Stats)) == 0) {
    m = ::mmap(nullptr, sizeof(Stats), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (fd >= 0) ::close(fd);
  if (m == MAP_FAILED) return CUDA_ERROR_NOT_INITIALIZED;
  p.stats = new (m) Stats{};
  p.stats->magic = kStatsMagic;
  for (std::size_t i = 0; i < p.uuids.size(); ++i) p.primary.push_back(new Context{static_cast<int>(i)});
  std::atexit(write_report);
  p.initialized = true;
  return p.uuids.empty() ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
}

CUEMU_API CUresult cuDriverGetVersion(int* v) {
  if (v == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *v = 12080;  // works before cuInit, as the driver's does
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuGetErrorString(CUresult r, const char** s) {
  if (s == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *s = error_string(r);
  return *s != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUEMU_API CUresult cuDeviceGetCount(int* n) {
  if (need_init()) return CUDA_ERROR_NOT_INITIALIZED;
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *n = device_count();
  return CUDA_SUCCESS;
}
CUEMU_API CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (need_init()) return CUDA_ERROR_NOT_INITIALIZED;
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
CUEMU_API CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
  if (need_init()) return CUDA_ERROR_NOT_INITIALIZED;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<std::size_t>(len), "Stoker CUDA emulation %d", d);
  return CUDA_SUCCESS;
}
CUEMU_API CUresult cuDeviceGetUuid_v2(CUuuid* u, CUdevice d) {
  if (need_init()) return CUDA_ERROR_NOT_INITIALIZED;
  if (u == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  device_uuid(d, reinterpret_cast<unsigned char*>(u->bytes));
  return CUDA_SUCCESS;
}
CUEMU_API CUresult cuDeviceGetAttribute(int* v, int attr, CUdevice d) {
  if (need_init()) return CUDA_ERROR_NOT_INITIALIZED;
  if (v == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  switch (attr) {
    case kAttrComputeMode: *v = proc().compute_mode; return CUDA_SUCCESS;
    case kAttrUnifiedAddressing:
    case kAttrReadOnlyHostRegister:
    case kAttrIpcEventSupported: *v = 1; return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;  // an attribute this emulation does not model
}

CUEMU_API CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) {
  if (need_init()) return CUDA_ERROR_NOT_INITIALIZED;
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  Context* ctx = proc().primary[static_cast<std::size_t>(d)];
  ++ctx->retained;
  ++stats().primary_retained[d];
  *c = ctx;
  return CUDA_SUCCESS;
}
CUEMU_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  if (need_init()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  Context* ctx = proc().primary[static_cast<std::size_t>(d)];
  int r = ctx->retained.load();
  // Releasing more often than retained: CUDA reports CUDA_ERROR_INVALID_CONTEXT.
  do {
    if (r == 0) return CUDA_ERROR_INVALID_CONTEXT;
  } while (!ctx->retained.compare_exchange_weak(r, r - 1));
  --stats().primary_retained[d];
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuCtxPushCurrent_v2(CUcontext c) {
  if (need_init()) return CUDA_ERROR_NOT_INITIALIZED;
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  bool known = false;
  for (Context* p : proc().primary) known = known || p == c;
  if (!known) return CUDA_ERROR_INVALID_CONTEXT;
  // A primary context that nobody retains is inactive: pushing it is a use after release.
  if (!context_alive(c)) return CUDA_ERROR_INVALID_CONTEXT;
  thread_stack().push_back(c);
  ++stats().pushed;
  return CUDA_SUCCESS;
}
CUEMU_API CUresult cuCtxPopCurrent_v2(CUcontext* out) {
  if (need_init()) return CUDA_ERROR_NOT_INITIALIZED;
  ContextStack& stack = thread_stack();
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (out != nullptr) *out = stack.back();
  stack.pop_back();
  --stats().pushed;
  return CUDA_SUCCESS;
}
