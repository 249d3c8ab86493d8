// The host simulation of a device (STOKER_DEVICE_BACKEND=hostsim): the device path's control
// flow runs in CI on machines without a GPU, and what CUDA leaves undefined aborts here.
//
//  - Devices: STOKER_HOSTSIM_DEVICES, a count ("2") or a comma list of UUIDs in the order this
//    process sees them (two processes may list the same GPUs in different orders, as
//    CUDA_VISIBLE_DEVICES does). Default: one device. STOKER_HOSTSIM_EXCLUSIVE names UUIDs
//    whose compute mode is simulated as EXCLUSIVE_PROCESS (open_device refuses them).
//  - Memory and events: shared-memory objects (hostsim_objects.hpp).
//  - Streams: one worker thread each, running queued operations in order.
//    STOKER_HOSTSIM_DELAY_US delays every copy, normalize and record, so a missing wait shows.
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "device/device_backend.hpp"
#include "device/hostsim_objects.hpp"
#include "base/mutex.hpp"

namespace stoker::device {
namespace hostsim {

namespace {

// State letter and start time (field 22) of /proc/PID/stat; false when there is no such file.
// The command name (field 2) may hold spaces and ')', so fields are counted after the last ')'.
bool read_proc_stat(std::int32_t pid, char& state, std::uint64_t& start) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return false;
  unsigned long long st = 0;
  // After ')': state(3) ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
  // utime stime cutime cstime priority nice num_threads itrealvalue starttime(22).
  if (std::sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                  &state, &st) != 2) {
    return false;
  }
  start = st;
  return true;
}

bool proc_mounted() {
  static const bool mounted = ::access("/proc/self/stat", R_OK) == 0;
  return mounted;
}

// Whether `pid` has exited, by its pidfd: 1 exited (a zombie or gone), 0 running, -1 unknown
// (no pidfd_open here).
int pidfd_exited(std::int32_t pid) {
#ifdef SYS_pidfd_open
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH ? 1 : -1;
  pollfd p{fd, POLLIN, 0};
  const int r = ::poll(&p, 1, 0);
  ::close(fd);
  if (r < 0) return -1;
  return r > 0 ? 1 : 0;  // readable once the process has exited
#else
  (void)pid;
  return -1;
#endif
}

}  // namespace

ProcessTag process_tag(std::int32_t pid) {
  if (pid <= 0) return 0;
  char state = 0;
  std::uint64_t start = 0;
  if (!read_proc_stat(pid, state, start)) start = 0;
  return (static_cast<ProcessTag>(static_cast<std::uint32_t>(pid)) << 32) | (start & 0xffffffffu);
}

ProcessTag self_tag() {
  static std::atomic<ProcessTag> cached{0};
  const auto me = static_cast<std::int32_t>(::getpid());
  ProcessTag t = cached.load(std::memory_order_relaxed);
  if (tag_pid(t) != me) {  // first use, or a forked child
    t = process_tag(me);
    cached.store(t, std::memory_order_relaxed);
  }
  return t;
}

bool process_alive(ProcessTag tag) {
  const std::int32_t pid = tag_pid(tag);
  if (pid <= 0 || tag == kTagBeingFilled) return false;
  // The pidfd answers "exited?" without /proc; a zombie reads as exited. It may name a later
  // holder of the pid: the start time below tells them apart.
  const int exited = pidfd_exited(pid);
  if (exited == 1) return false;
  char state = 0;
  std::uint64_t start = 0;
  if (read_proc_stat(pid, state, start)) {
    if (state == 'Z' || state == 'X') return false;
    const auto want = static_cast<std::uint32_t>(tag);
    return want == 0 || static_cast<std::uint32_t>(start) == want;
  }
  // No /proc/PID while /proc is there: reaped (perhaps since the pidfd look). Never "alive".
  if (proc_mounted()) return false;
  if (exited == 0) return true;
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

void remove_stale_objects() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string n = e.path().filename().string();
    int pid = 0;
    if (std::sscanf(n.c_str(), "stoker-sim-%d-", &pid) != 1) continue;
    // The creator's tag from the header tells a dead creator from a new process with its pid.
    ProcessTag creator = static_cast<ProcessTag>(static_cast<std::uint32_t>(pid)) << 32;
    const int fd = ::shm_open(("/" + n).c_str(), O_RDONLY | O_CLOEXEC, 0);
    if (fd >= 0) {
      struct stat st {};
      if (::fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) >= sizeof(SimObjectHeader)) {
        void* p = ::mmap(nullptr, sizeof(SimObjectHeader), PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
          const auto* h = static_cast<const SimObjectHeader*>(p);
          if (h->magic == kSimMagic && h->creator_pid == pid && tag_pid(h->creator) == pid) creator = h->creator;
          ::munmap(p, sizeof(SimObjectHeader));
        }
      }
      ::close(fd);
    }
    if (!process_alive(creator)) ::shm_unlink(("/" + n).c_str());
  }
}

namespace {

[[noreturn]] void sim_abort(const std::string& what) {
  std::fprintf(stderr, "stoker hostsim: %s (undefined behaviour under CUDA; aborting)\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

long delay_us() {
  static const long d = [] {
    const char* v = std::getenv("STOKER_HOSTSIM_DELAY_US");
    return v ? std::max(0L, std::strtol(v, nullptr, 10)) : 0L;
  }();
  return d;
}

void injected_delay() {
  if (const long d = delay_us(); d > 0) std::this_thread::sleep_for(std::chrono::microseconds(d));
}

// One mapped object of this process.
struct Mapped {
  std::string name;
  SimObjectHeader* header = nullptr;
  std::size_t map_bytes = 0;
  bool created = false;  // by this process (exporter) rather than opened
  int device = -1;
  std::uint8_t* data() const { return reinterpret_cast<std::uint8_t*>(header) + kSimDataOffset; }
};

class SimStream {
 public:
  SimStream() : thread_([this] { loop(); }) {}
  ~SimStream() {
    {
      base::MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void push(std::function<void()> op) {
    {
      base::MutexLock lock(mu_);
      ops_.push_back(std::move(op));
    }
    cv_.notify_all();
  }
  void drain() {
    base::MutexLock lock(mu_);
    while (!ops_.empty() || busy_) idle_cv_.wait(lock);
  }

 private:
  void loop() {
    base::MutexLock lock(mu_);
    for (;;) {
      while (!stop_ && ops_.empty()) cv_.wait(lock);
      if (ops_.empty()) return;  // stop_ and drained
      auto op = std::move(ops_.front());
      ops_.pop_front();
      busy_ = true;
      lock.unlock();
      op();
      lock.lock();
      busy_ = false;
      if (ops_.empty()) idle_cv_.notify_all();
    }
  }
  base::Mutex mu_;
  base::CondVar cv_, idle_cv_;
  std::deque<std::function<void()>> ops_ STOKER_GUARDED_BY(mu_);
  bool busy_ STOKER_GUARDED_BY(mu_) = false;  // an op runs (unlocked) on thread_
  bool stop_ STOKER_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

bool event_complete(const SimObjectHeader* h, std::uint64_t target) {
  if (h->completed.load(std::memory_order_acquire) >= target) return true;
  // The recorder died: its queued work is gone with its context, the event will never move.
  return !process_alive(h->last_recorder.load());
}

void wait_event(const SimObjectHeader* h, std::uint64_t target) {
  while (!event_complete(h, target)) std::this_thread::sleep_for(std::chrono::microseconds(20));
}

class HostSimBackend final : public Backend {
 public:
  explicit HostSimBackend(std::vector<DeviceInfo> devices, std::set<Uuid> exclusive)
      : devices_(std::move(devices)), exclusive_(std::move(exclusive)) {}

  ~HostSimBackend() override {
    std::map<StreamId, std::unique_ptr<SimStream>> streams;
    {
      base::MutexLock lock(mu_);
      streams.swap(streams_);
    }
    streams.clear();  // joins every stream thread after its queue ran
    base::MutexLock lock(mu_);
    for (auto& [p, m] : objects_) {
      ::munmap(m.header, m.map_bytes);
      // Objects still created here at exit are left for remove_stale_objects (a daemon stopping
      // with consumers still mapped: they keep their mapping, as the driver would not).
    }
  }

  BackendKind kind() const override { return BackendKind::kHostSim; }

  DeviceList devices() override { return DeviceList{devices_, {}}; }

  base::Status open_device(int device) override {
    if (device < 0 || device >= static_cast<int>(devices_.size())) {
      return base::Status::error("hostsim: no device " + std::to_string(device) + " (" +
                                 std::to_string(devices_.size()) + " simulated)");
    }
    if (exclusive_.count(devices_[device].uuid) != 0) {
      return base::Status::error(
          "GPU " + uuid_string(devices_[device].uuid) +
          " is in compute mode EXCLUSIVE_PROCESS: only one process may use it, so stokerd and "
          "the trainer cannot share it (set it to DEFAULT with `nvidia-smi -c DEFAULT`)");
    }
    base::MutexLock lock(mu_);
    opened_.insert(device);
    return {};
  }

  base::Result<StreamId> create_stream(int device) override {
    check_device(device);
    auto s = std::make_unique<SimStream>();
    const auto out = reinterpret_cast<StreamId>(s.get());
    base::MutexLock lock(mu_);
    streams_[out] = std::move(s);
    return out;
  }

  void destroy_stream(int device, StreamId s) override {
    check_device(device);
    std::unique_ptr<SimStream> dead;
    {
      base::MutexLock lock(mu_);
      auto it = streams_.find(s);
      if (it == streams_.end()) sim_abort("destroying a stream that does not exist");
      dead = std::move(it->second);
      streams_.erase(it);
    }
  }

  base::Status record(int device, EventId e, StreamId s) override {
    base::Result<SimStream*> found = stream(device, s);
    if (!found) return found.status();
    SimStream* st = *found;
    SimObjectHeader* h = event_header(e);
    const std::uint64_t seq = h->recorded.fetch_add(1) + 1;
    h->last_recorder.store(self_tag());
    st->push([h, seq] {
      injected_delay();
      std::uint64_t cur = h->completed.load();
      while (cur < seq && !h->completed.compare_exchange_weak(cur, seq)) {
      }
    });
    return {};
  }

  base::Status stream_wait(int device, StreamId s, EventId e) override {
    base::Result<SimStream*> found = stream(device, s);
    if (!found) return found.status();
    SimStream* st = *found;
    SimObjectHeader* h = event_header(e);
    const std::uint64_t target = h->recorded.load();
    st->push([h, target] { wait_event(h, target); });
    return {};
  }

  base::Status synchronize_stream(int device, StreamId s) override {
    base::Result<SimStream*> found = stream(device, s);
    if (!found) return found.status();
    SimStream* st = *found;
    st->drain();
    return {};
  }

  base::Status synchronize_event(int device, EventId e) override {
    check_device(device);
    const SimObjectHeader* h = event_header(e);
    wait_event(h, h->recorded.load());
    return {};
  }

  bool event_done(int device, EventId e) override {
    check_device(device);
    const SimObjectHeader* h = event_header(e);
    return event_complete(h, h->recorded.load());
  }

  base::Status register_host(int device, void* p, std::size_t bytes, bool) override {
    check_device(device);
    base::MutexLock lock(mu_);
    if (!registered_.emplace(p, bytes).second) {
      return base::Status::error("hostsim: host range already registered");
    }
    return {};
  }

  void unregister_host(int device, void* p) override {
    check_device(device);
    base::MutexLock lock(mu_);
    registered_.erase(p);
  }

  base::Result<DeviceBuffer> allocate(int device, std::size_t bytes) override {
    check_device(device);
    Mapped m;
    if (base::Status made = create_object(ObjectKind::kMemory, bytes, m); !made) return made;
    m.device = device;
    DeviceBuffer out;
    out.device = device;
    out.ptr = m.data();
    out.bytes = bytes;
    out.handle = handle_of(m, ObjectKind::kMemory, bytes);
    out.impl = reinterpret_cast<std::uintptr_t>(m.header);
    base::MutexLock lock(mu_);
    objects_[m.header] = m;
    return out;
  }

  void free(DeviceBuffer& b) override {
    check_device(b.device);
    destroy_object(reinterpret_cast<SimObjectHeader*>(b.impl), "device memory");
    b = DeviceBuffer{};
  }

  base::Result<IpcEvent> create_ipc_event(int device) override {
    check_device(device);
    Mapped m;
    if (base::Status made = create_object(ObjectKind::kEvent, 0, m); !made) return made;
    m.device = device;
    IpcEvent out;
    out.handle = handle_of(m, ObjectKind::kEvent, 0);
    out.event = reinterpret_cast<EventId>(m.header);
    base::MutexLock lock(mu_);
    objects_[m.header] = m;
    return out;
  }

  void destroy_event(int device, EventId e) override {
    check_device(device);
    destroy_object(event_header(e), "an interprocess event");
  }

  base::Status copy_to_device(StreamId s, const DeviceBuffer& dst, std::size_t dst_offset, const void* src,
                              std::size_t bytes) override {
    base::Result<SimStream*> found = stream(dst.device, s);
    if (!found) return found.status();
    SimStream* st = *found;
    if (dst_offset + bytes > dst.bytes) return base::Status::error("hostsim: copy past the end of the allocation");
    auto* h = reinterpret_cast<SimObjectHeader*>(dst.impl);
    auto* d = static_cast<std::uint8_t*>(dst.ptr) + dst_offset;
    st->push([h, d, src, bytes, dst_offset] {
      injected_delay();
      check_no_reader(h, dst_offset, bytes);
      std::memcpy(d, src, bytes);
    });
    return {};
  }

  base::Status normalize(StreamId s, const DeviceBuffer& dst, std::size_t dst_offset, const DeviceBuffer& src,
                         std::size_t src_offset, std::uint32_t count, const NormalizeSpec& spec) override {
    base::Result<SimStream*> found = stream(dst.device, s);
    if (!found) return found.status();
    SimStream* st = *found;
    const std::size_t elems = std::size_t{count} * spec.channels * spec.height * spec.width;
    const std::size_t out_size = spec.out_size();
    if (dst_offset + elems * out_size > dst.bytes || src_offset + elems > src.bytes ||
        spec.channels < 1 || spec.channels > 4) {
      return base::Status::error("hostsim: normalize outside its buffers");
    }
    auto* h = reinterpret_cast<SimObjectHeader*>(dst.impl);
    auto* out = static_cast<std::uint8_t*>(dst.ptr) + dst_offset;
    const auto* in = static_cast<const std::uint8_t*>(src.ptr) + src_offset;
    st->push([=] {
      injected_delay();
      check_no_reader(h, dst_offset, elems * out_size);
      const std::size_t plane = std::size_t{spec.height} * spec.width;
      for (std::size_t i = 0; i < elems; ++i) {
        const std::size_t c = spec.layout == 2 ? i % spec.channels : (i / plane) % spec.channels;
        const std::uint32_t v = spec.table[c][in[i]];
        if (out_size == 2) {
          const auto half = static_cast<std::uint16_t>(v);
          std::memcpy(out + 2 * i, &half, 2);
        } else {
          std::memcpy(out + 4 * i, &v, 4);
        }
      }
    });
    return {};
  }

  base::Result<void*> open_memory(int device, const IpcHandle& handle, std::size_t bytes) override {
    check_device(device);
    Mapped m;
    if (base::Status opened = open_object(handle, ObjectKind::kMemory, m); !opened) return opened;
    if (m.header->bytes < bytes) {
      close_mapping(m);
      return base::Status::error("hostsim: allocation smaller than announced");
    }
    m.device = device;
    void* ptr = m.data();
    base::MutexLock lock(mu_);
    objects_[m.header] = m;
    return ptr;
  }

  void close_memory(int device, void* ptr) override {
    check_device(device);
    close_opened(reinterpret_cast<SimObjectHeader*>(static_cast<std::uint8_t*>(ptr) - kSimDataOffset),
                 "device memory");
  }

  base::Result<EventId> open_event(int device, const IpcHandle& handle) override {
    check_device(device);
    Mapped m;
    if (base::Status opened = open_object(handle, ObjectKind::kEvent, m); !opened) return opened;
    m.device = device;
    const auto out = reinterpret_cast<EventId>(m.header);
    base::MutexLock lock(mu_);
    objects_[m.header] = m;
    return out;
  }

  void close_event(int device, EventId e) override {
    check_device(device);
    close_opened(event_header(e), "an interprocess event");
  }

  base::Status copy_to_host(int device, StreamId s, void* dst, const void* src,
                            std::size_t bytes) override {
    if (base::Status st = synchronize_stream(device, s); !st) return st;
    std::memcpy(dst, src, bytes);
    return {};
  }

  bool host_addressable() const override { return true; }

  void annotate_read_begin(int device, const void* ptr, std::size_t bytes, StreamId s) override {
    base::Result<SimStream*> found = stream(device, s);
    if (!found) sim_abort(found.status().message());
    SimStream* st = *found;
    auto [h, off] = locate(ptr);
    const ProcessTag me = self_tag();
    // The reads begin when the stream gets here, i.e. after the waits queued before.
    st->push([h = h, off = off, bytes, me] {
      for (auto& l : h->leases) {
        ProcessTag free_entry = 0;
        if (l.owner.compare_exchange_strong(free_entry, kTagBeingFilled)) {
          l.begin.store(off);
          l.end.store(off + bytes);
          l.owner.store(me);
          return;
        }
      }
      sim_abort("more than " + std::to_string(kMaxLeases) + " device ranges read at once");
    });
  }

  void annotate_read_end(int device, const void* ptr, std::size_t bytes, StreamId s) override {
    base::Result<SimStream*> found = stream(device, s);
    if (!found) sim_abort(found.status().message());
    SimStream* st = *found;
    auto [h, off] = locate(ptr);
    const ProcessTag me = self_tag();
    st->push([h = h, off = off, bytes, me] {
      for (auto& l : h->leases) {
        if (l.owner.load() == me && l.begin.load() == off && l.end.load() == off + bytes) {
          l.owner.store(0);
          return;
        }
      }
      sim_abort("end of a device read that never began");
    });
  }

 private:
  void check_device(int device) {
    base::MutexLock lock(mu_);
    if (opened_.count(device) == 0) {
      sim_abort("device " + std::to_string(device) +
                " used before open_device named it (a context on a device nobody named)");
    }
  }

  // The simulated stream `s` of `device` (the default stream is made at first use).
  base::Result<SimStream*> stream(int device, StreamId s) {
    check_device(device);
    base::MutexLock lock(mu_);
    if (s == kDefaultStream) {
      auto& d = default_streams_[device];
      if (!d) d = std::make_unique<SimStream>();
      return d.get();
    }
    auto it = streams_.find(s);
    if (it == streams_.end()) {
      return base::Status::error(
          "hostsim: unknown stream (only the default stream and streams created by this "
          "backend are simulated)");
    }
    return it->second.get();
  }

  SimObjectHeader* event_header(EventId e) {
    auto* h = reinterpret_cast<SimObjectHeader*>(e);
    base::MutexLock lock(mu_);
    auto it = objects_.find(h);
    if (it == objects_.end() || h->kind != static_cast<std::uint32_t>(ObjectKind::kEvent)) {
      sim_abort("use of an event that is not open in this process");
    }
    return h;
  }

  // Object and data offset of a pointer into an allocation this process mapped.
  std::pair<SimObjectHeader*, std::uint64_t> locate(const void* ptr) {
    const auto* p = static_cast<const std::uint8_t*>(ptr);
    base::MutexLock lock(mu_);
    for (auto& [h, m] : objects_) {
      if (m.header->kind == static_cast<std::uint32_t>(ObjectKind::kMemory) && p >= m.data() &&
          p < m.data() + m.header->bytes) {
        return {m.header, static_cast<std::uint64_t>(p - m.data())};
      }
    }
    sim_abort("pointer outside every device allocation this process mapped");
  }

  static void check_no_reader(SimObjectHeader* h, std::uint64_t off, std::uint64_t bytes) {
    for (auto& l : h->leases) {
      const ProcessTag owner = l.owner.load();
      if (owner == 0 || !process_alive(owner)) continue;
      const std::int32_t pid = tag_pid(owner);
      if (l.begin.load() < off + bytes && off < l.end.load()) {
        sim_abort("overwriting device bytes [" + std::to_string(off) + ", " +
                  std::to_string(off + bytes) + ") that pid " + std::to_string(pid) +
                  " still reads: its release fence has not completed");
      }
    }
  }

  IpcHandle handle_of(const Mapped& m, ObjectKind kind, std::uint64_t bytes) {
    SimHandle sh{};
    sh.magic = kHandleMagic;
    sh.kind = static_cast<std::uint32_t>(kind);
    sh.bytes = bytes;
    std::snprintf(sh.name, sizeof sh.name, "%s", m.name.c_str());
    IpcHandle h{};
    std::memcpy(h.data(), &sh, sizeof sh);
    return h;
  }

  base::Status create_object(ObjectKind kind, std::size_t bytes, Mapped& m) {
    static std::atomic<std::uint64_t> seq{0};
    m.name = "/stoker-sim-" + std::to_string(::getpid()) + "-" + std::to_string(++seq);
    const int fd = ::shm_open(m.name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return base::Status::error("hostsim: shm_open " + m.name + ": " + std::strerror(errno));
    m.map_bytes = kSimDataOffset + bytes;
    if (::ftruncate(fd, static_cast<off_t>(m.map_bytes)) != 0) {
      const std::string why = "hostsim: cannot size " + m.name + ": " + std::strerror(errno);
      ::close(fd);
      ::shm_unlink(m.name.c_str());
      return base::Status::error(why);
    }
    void* p = ::mmap(nullptr, m.map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) {
      const std::string why = "hostsim: cannot map " + m.name + ": " + std::strerror(errno);
      ::shm_unlink(m.name.c_str());
      return base::Status::error(why);
    }
    m.header = static_cast<SimObjectHeader*>(p);  // zero-filled by ftruncate
    m.header->kind = static_cast<std::uint32_t>(kind);
    m.header->creator_pid = static_cast<std::int32_t>(::getpid());
    m.header->creator = self_tag();
    m.header->bytes = bytes;
    std::atomic_thread_fence(std::memory_order_release);
    m.header->magic = kSimMagic;
    m.created = true;
    return {};
  }

  base::Status open_object(const IpcHandle& handle, ObjectKind kind, Mapped& m) {
    SimHandle sh;
    std::memcpy(&sh, handle.data(), sizeof sh);
    sh.name[sizeof sh.name - 1] = '\0';
    if (sh.magic != kHandleMagic || sh.kind != static_cast<std::uint32_t>(kind)) {
      return base::Status::error("not a hostsim handle (is stokerd running with STOKER_DEVICE_BACKEND=hostsim?)");
    }
    m.name = sh.name;
    const int fd = ::shm_open(m.name.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
      return base::Status::error("hostsim: cannot open " + m.name + ": " + std::strerror(errno));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < kSimDataOffset) {
      ::close(fd);
      return base::Status::error("hostsim: " + m.name + " is not a simulated object");
    }
    m.map_bytes = static_cast<std::size_t>(st.st_size);
    void* p = ::mmap(nullptr, m.map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) {
      return base::Status::error("hostsim: cannot map " + m.name + ": " + std::strerror(errno));
    }
    m.header = static_cast<SimObjectHeader*>(p);
    if (m.header->magic != kSimMagic || m.header->kind != static_cast<std::uint32_t>(kind) ||
        kSimDataOffset + m.header->bytes > m.map_bytes) {
      ::munmap(p, m.map_bytes);
      return base::Status::error("hostsim: " + m.name + " has a bad header");
    }
    // Register as an opener of the object.
    // An entry is this process's, free, or a gone process's (claimed back: a dead peer's
    // handles are closed). Claiming goes through kTagBeingFilled so that nobody counts a
    // claimed entry's stale count under the new owner.
    const ProcessTag me = self_tag();
    for (auto& o : m.header->openers) {
      ProcessTag cur = o.owner.load();
      if (cur == me) {
        o.count.fetch_add(1);
        return {};
      }
      if (cur == kTagBeingFilled || (cur != 0 && process_alive(cur))) continue;
      if (o.owner.compare_exchange_strong(cur, kTagBeingFilled)) {
        o.count.store(1);
        o.owner.store(me);
        return {};
      }
    }
    ::munmap(p, m.map_bytes);
    return base::Status::error("hostsim: more than " + std::to_string(kMaxOpeners) + " processes opened " + m.name);
  }

  void close_mapping(Mapped& m) {
    const ProcessTag me = self_tag();
    for (auto& o : m.header->openers) {
      if (o.owner.load() == me) o.count.fetch_sub(1);
    }
    ::munmap(m.header, m.map_bytes);
  }

  void close_opened(SimObjectHeader* h, const char* what) {
    Mapped m;
    {
      base::MutexLock lock(mu_);
      auto it = objects_.find(h);
      if (it == objects_.end() || it->second.created) {
        sim_abort(std::string("closing ") + what + " that is not open in this process (double close?)");
      }
      m = it->second;
      objects_.erase(it);
    }
    close_mapping(m);
  }

  void destroy_object(SimObjectHeader* h, const char* what) {
    Mapped m;
    {
      base::MutexLock lock(mu_);
      auto it = objects_.find(h);
      if (it == objects_.end() || !it->second.created) {
        sim_abort(std::string("freeing ") + what + " that this process did not create (double free?)");
      }
      m = it->second;
      objects_.erase(it);
    }
    for (auto& o : h->openers) {
      const ProcessTag owner = o.owner.load();
      const std::int32_t pid = tag_pid(owner);
      if (owner != kTagBeingFilled && o.count.load() > 0 && process_alive(owner)) {
        sim_abort(std::string("freeing ") + what + " " + m.name + " that pid " + std::to_string(pid) +
                  " still has open");
      }
    }
    ::shm_unlink(m.name.c_str());
    ::munmap(m.header, m.map_bytes);
  }

  const std::vector<DeviceInfo> devices_;
  const std::set<Uuid> exclusive_;
  base::Mutex mu_;
  std::set<int> opened_ STOKER_GUARDED_BY(mu_);
  std::map<StreamId, std::unique_ptr<SimStream>> streams_ STOKER_GUARDED_BY(mu_);
  std::map<int, std::unique_ptr<SimStream>> default_streams_ STOKER_GUARDED_BY(mu_);
  std::map<SimObjectHeader*, Mapped> objects_ STOKER_GUARDED_BY(mu_);
  std::map<void*, std::size_t> registered_ STOKER_GUARDED_BY(mu_);
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t b = 0;
  while (b <= s.size()) {
    const std::size_t e = std::min(s.find(',', b), s.size());
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

}  // namespace
}  // namespace hostsim

BackendResult make_hostsim_backend() {
  const char* env = std::getenv("STOKER_HOSTSIM_DEVICES");
  const std::string spec = env != nullptr && *env != '\0' ? env : "1";
  std::vector<DeviceInfo> devices;
  char* end = nullptr;
  const long n = std::strtol(spec.c_str(), &end, 10);
  if (end != nullptr && *end == '\0') {
    for (long i = 0; i < n && i < 64; ++i) {
      DeviceInfo d;
      d.ordinal = static_cast<int>(i);
      d.uuid = Uuid{0x5a, 0xfe, 0x51, 0x30};
      d.uuid[15] = static_cast<std::uint8_t>(i);
      d.name = "hostsim device " + std::to_string(i);
      devices.push_back(d);
    }
  } else {
    for (const auto& u : hostsim::split(spec)) {
      DeviceInfo d;
      if (!parse_uuid(u, d.uuid)) {
        return base::Status::error("STOKER_HOSTSIM_DEVICES: '" + u + "' is not a GPU UUID");
      }
      d.ordinal = static_cast<int>(devices.size());
      d.name = "hostsim device " + u;
      devices.push_back(d);
    }
  }
  if (devices.empty()) {
    return base::Status::error("hostsim: STOKER_HOSTSIM_DEVICES lists no device");
  }
  std::set<Uuid> exclusive;
  if (const char* ex = std::getenv("STOKER_HOSTSIM_EXCLUSIVE")) {
    for (const auto& u : hostsim::split(ex)) {
      Uuid id;
      if (parse_uuid(u, id)) exclusive.insert(id);
    }
  }
  return std::unique_ptr<Backend>(std::make_unique<hostsim::HostSimBackend>(std::move(devices), std::move(exclusive)));
}

}  // namespace stoker::device
