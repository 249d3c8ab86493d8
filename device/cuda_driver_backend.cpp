// The `cuda` device backend: the CUDA driver API, loaded at run time (cuda_driver_api.hpp).
// One implementation serves both sides: libstoker opens IPC handles and orders the trainer's
// stream; stokerd allocates, exports, copies and (given the normalize kernel's image, built by
// daemon/cuda) normalizes.
//
// Contexts: every call pushes the primary context of the device it names and pops it before
// returning, so the calling thread's current context (torch's) is left as it was, and no call
// ever touches a device that open_device() did not name (no stray context on GPU 0).
// Invariant: a device's entry in ctx_ exists from open_device() until the destructor, and is
// never changed; driver calls are made without holding mu_.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "device/cuda_driver_api.hpp"
#include "device/device_backend.hpp"
#include "base/mutex.hpp"

namespace stoker::device {
namespace {

using namespace cu;

// Both entry points of daemon/cuda/normalize_table.cu: the first takes either output type, the
// second float32 only (streaming accesses, its own registers; faster there on an H200).
constexpr const char* kNormalizeKernel = "stoker_normalize_table";
constexpr const char* kNormalizeF32Kernel = "stoker_normalize_table_f32";

class CudaDriverBackend final : public Backend {
 public:
  CudaDriverBackend(const DriverApi& api, const void* kernel_image) : api_(api), kernel_image_(kernel_image) {}

  ~CudaDriverBackend() override {
    for (auto& [device, st] : devices_) {
      if (Scope s(*this, st.ctx); s.ok) {
        for (auto& [key, ptr] : st.tables) api_.cuMemFree(ptr);
        if (st.module != nullptr) api_.cuModuleUnload(st.module);
      }
      api_.cuDevicePrimaryCtxRelease(st.dev);
    }
  }

  BackendKind kind() const override { return BackendKind::kCuda; }
  std::string version() const override {
    int v = 0;
    api_.cuDriverGetVersion(&v);
    return "CUDA driver " + std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10) +
           " (Stoker needs 11.4 or newer)";
  }
  bool host_addressable() const override { return false; }

  base::Status can_normalize() const override {
    if (kernel_image_ != nullptr) return {};
    return base::Status::error(
        "this stokerd was built without the CUDA toolkit, so it has no normalize kernel "
        "(rebuild with nvcc, or set device_normalize: false)");
  }

  DeviceList devices() override {
    DeviceList list;
    std::vector<DeviceInfo>& out = list.devices;
    std::string& why = list.skipped;
    int n = 0;
    if (!check(api_.cuDeviceGetCount(&n), "cuDeviceGetCount", why)) return list;
    for (int i = 0; i < n; ++i) {
      CUdevice d = 0;
      DeviceInfo info;
      info.ordinal = i;
      char name[256] = {};
      CUuuid u{};
      if (!check(api_.cuDeviceGet(&d, i), "cuDeviceGet", why) ||
          !check(api_.cuDeviceGetName(name, sizeof name - 1, d), "cuDeviceGetName", why) ||
          !check(api_.cuDeviceGetUuid(&u, d), "cuDeviceGetUuid", why)) {
        continue;
      }
      info.name = name;
      std::memcpy(info.uuid.data(), u.bytes, 16);
      out.push_back(std::move(info));
    }
    return list;
  }

  base::Status open_device(int device) override {
    std::string why;
    base::MutexLock lock(mu_);
    if (devices_.count(device) != 0) return {};
    CUdevice d = 0;
    if (!check(api_.cuDeviceGet(&d, device), "cuDeviceGet", why)) return base::Status::error(why);
    // Refusals name the GPU by UUID too: the ordinal is this process's, and the two processes
    // number GPUs differently under CUDA_VISIBLE_DEVICES.
    std::string gpu = "GPU " + std::to_string(device);
    if (CUuuid u{}; api_.cuDeviceGetUuid(&u, d) == CUDA_SUCCESS) {
      Uuid id;
      std::memcpy(id.data(), u.bytes, id.size());
      gpu += " (" + uuid_string(id) + ")";
    }
    int mode = CU_COMPUTEMODE_DEFAULT;
    if (!check(api_.cuDeviceGetAttribute(&mode, CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, d), "cuDeviceGetAttribute", why)) {
      return base::Status::error(why);
    }
    if (mode == CU_COMPUTEMODE_EXCLUSIVE_PROCESS || mode == CU_COMPUTEMODE_PROHIBITED) {
      why = gpu + " is in compute mode " + (mode == CU_COMPUTEMODE_PROHIBITED ? "PROHIBITED" : "EXCLUSIVE_PROCESS") +
            ": CUDA IPC needs the daemon and the trainer on the same GPU (nvidia-smi -c DEFAULT)";
      return base::Status::error(why);
    }
    int uva = 0;
    if (api_.cuDeviceGetAttribute(&uva, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, d) == CUDA_SUCCESS && uva == 0) {
      why = gpu + " has no unified addressing, which CUDA IPC requires";
      return base::Status::error(why);
    }
    // Older drivers do not know the attribute (CUDA_ERROR_INVALID_VALUE): IPC events were
    // supported everywhere IPC memory was, then.
    int ipc_events = 1;
    if (api_.cuDeviceGetAttribute(&ipc_events, CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, d) == CUDA_SUCCESS &&
        ipc_events == 0) {
      why = gpu + " does not support CUDA IPC events (WSL, or a driver/platform without legacy IPC)";
      return base::Status::error(why);
    }
    int ro = 0;
    api_.cuDeviceGetAttribute(&ro, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, d);
    DeviceState st;
    st.dev = d;
    st.read_only_register = ro != 0;
    if (!check(api_.cuDevicePrimaryCtxRetain(&st.ctx, d), "cuDevicePrimaryCtxRetain", why))
      return base::Status::error(why);
    devices_.emplace(device, std::move(st));
    return {};
  }

  base::Result<StreamId> create_stream(int device) override {
    std::string why;
    Scope s(*this, device, why);
    CUstream st = nullptr;
    if (!s.ok || !check(api_.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING), "cuStreamCreate", why)) {
      return base::Status::error(why);
    }
    return reinterpret_cast<StreamId>(st);
  }
  void destroy_stream(int device, StreamId st) override {
    std::string why;
    if (Scope s(*this, device, why); s.ok) api_.cuStreamDestroy(stream(st));
  }

  base::Status record(int device, EventId e, StreamId st) override {
    std::string why;
    Scope s(*this, device, why);
    if (s.ok && check(api_.cuEventRecord(event(e), stream(st)), "cuEventRecord", why)) return {};
    return base::Status::error(why);
  }
  base::Status stream_wait(int device, StreamId st, EventId e) override {
    std::string why;
    Scope s(*this, device, why);
    if (s.ok && check(api_.cuStreamWaitEvent(stream(st), event(e), 0), "cuStreamWaitEvent", why)) {
      return {};
    }
    return base::Status::error(why);
  }
  base::Status synchronize_stream(int device, StreamId st) override {
    std::string why;
    Scope s(*this, device, why);
    if (s.ok && check(api_.cuStreamSynchronize(stream(st)), "cuStreamSynchronize", why)) return {};
    return base::Status::error(why);
  }
  base::Status synchronize_event(int device, EventId e) override {
    std::string why;
    Scope s(*this, device, why);
    if (s.ok && check(api_.cuEventSynchronize(event(e)), "cuEventSynchronize", why)) return {};
    return base::Status::error(why);
  }
  bool event_done(int device, EventId e) override {
    std::string why;
    Scope s(*this, device, why);
    // An error other than "not ready" is sticky and will surface at the next call that checks;
    // reporting it as done here keeps a teardown from waiting forever.
    return !s.ok || api_.cuEventQuery(event(e)) != CUDA_ERROR_NOT_READY;
  }

  base::Status register_host(int device, void* p, std::size_t bytes, bool read_only) override {
    std::string why;
    Scope s(*this, device, why);
    if (!s.ok) return base::Status::error(why);
    unsigned flags = kHostRegisterPortable;
    if (read_only && s.state->read_only_register) flags |= kHostRegisterReadOnly;
    CUresult r = api_.cuMemHostRegister(p, bytes, flags);
    // A read-only mapping (a trainer's view of the ring) cannot be registered writable.
    if (r != CUDA_SUCCESS && (flags & kHostRegisterReadOnly) == 0 && read_only) {
      r = api_.cuMemHostRegister(p, bytes, flags | kHostRegisterReadOnly);
    }
    if (r == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) return {};  // someone else owns it
    if (!check(r, "cuMemHostRegister", why)) return base::Status::error(why);
    base::MutexLock lock(mu_);
    registered_.insert(p);
    return {};
  }
  void unregister_host(int device, void* p) override {
    {
      base::MutexLock lock(mu_);
      if (registered_.erase(p) == 0) return;
    }
    std::string why;
    if (Scope s(*this, device, why); s.ok) api_.cuMemHostUnregister(p);
  }

  base::Result<DeviceBuffer> allocate(int device, std::size_t bytes) override {
    std::string why;
    Scope s(*this, device, why);
    if (!s.ok) return base::Status::error(why);
    CUdeviceptr p = 0;
    if (!check(api_.cuMemAlloc(&p, std::max<std::size_t>(bytes, 1)), "cuMemAlloc", why)) {
      return base::Status::error(why);
    }
    CUipcMemHandle h{};
    if (!check(api_.cuIpcGetMemHandle(&h, p), "cuIpcGetMemHandle", why)) {
      api_.cuMemFree(p);
      return base::Status::error(why);
    }
    DeviceBuffer out;
    out.device = device;
    out.ptr = reinterpret_cast<void*>(p);
    out.bytes = bytes;
    std::memcpy(out.handle.data(), h.reserved, out.handle.size());
    return out;
  }
  void free(DeviceBuffer& b) override {
    std::string why;
    if (Scope s(*this, b.device, why); s.ok && b.ptr != nullptr) api_.cuMemFree(dptr(b.ptr));
    b.ptr = nullptr;
  }

  base::Result<IpcEvent> create_ipc_event(int device) override {
    std::string why;
    Scope s(*this, device, why);
    CUevent e = nullptr;
    if (!s.ok ||
        !check(api_.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS), "cuEventCreate", why)) {
      return base::Status::error(why);
    }
    CUipcEventHandle h{};
    if (!check(api_.cuIpcGetEventHandle(&h, e), "cuIpcGetEventHandle", why)) {
      api_.cuEventDestroy(e);
      return base::Status::error(why);
    }
    IpcEvent out;
    std::memcpy(out.handle.data(), h.reserved, out.handle.size());
    out.event = reinterpret_cast<EventId>(e);
    return out;
  }
  void destroy_event(int device, EventId e) override { close_event(device, e); }

  base::Status copy_to_device(StreamId st, const DeviceBuffer& dst, std::size_t dst_offset, const void* src,
                              std::size_t bytes) override {
    if (dst_offset + bytes > dst.bytes) return base::Status::error("copy_to_device outside its buffer");
    std::string why;
    Scope s(*this, dst.device, why);
    if (s.ok &&
        check(api_.cuMemcpyHtoDAsync(dptr(dst.ptr) + dst_offset, src, bytes, stream(st)), "cuMemcpyHtoDAsync", why)) {
      return {};
    }
    return base::Status::error(why);
  }

  base::Status normalize(StreamId st, const DeviceBuffer& dst, std::size_t dst_offset, const DeviceBuffer& src,
                         std::size_t src_offset, std::uint32_t count, const NormalizeSpec& spec) override {
    const std::size_t plane = std::size_t{spec.height} * spec.width;
    const unsigned long long elems = std::size_t{count} * spec.channels * plane;
    const std::size_t out_size = spec.out_size();
    if (spec.channels < 1 || spec.channels > 4 || dst_offset + elems * out_size > dst.bytes ||
        src_offset + elems > src.bytes) {
      return base::Status::error("normalize outside its buffers");
    }
    if (elems == 0) return {};
    std::string why;
    Scope s(*this, dst.device, why);
    if (!s.ok) return base::Status::error(why);
    if (base::Status can = can_normalize(); !can) return can;
    CUfunction fn = nullptr;
    CUdeviceptr table = 0;
    if (!kernel_for(*s.state, spec, fn, table, why)) return base::Status::error(why);
    CUdeviceptr in = dptr(src.ptr) + src_offset;
    CUdeviceptr out = dptr(dst.ptr) + dst_offset;
    unsigned plane32 = static_cast<unsigned>(plane);
    unsigned channels = spec.channels;
    unsigned nhwc = spec.layout == 2 ? 1 : 0;
    unsigned half = spec.half() ? 1 : 0;
    unsigned long long n = elems;
    void* args[] = {&in, &out, &n, &plane32, &channels, &nhwc, &half, &table};
    // About one resident wave (an H100/H200 holds 8 such blocks on each of its 132 SMs): every
    // block first copies the table into shared memory, so a grid of one block per 1024
    // elements spent more on those copies and block starts than on the batch (measured on an
    // H200: 0.29 of a device copy's bandwidth, docs/GPU.md). The grid-stride loop covers the rest.
    constexpr unsigned kThreads = 256, kPerThread = 4, kMaxBlocks = 1024;  // as normalize_table.cu
    const unsigned long long per_block = kThreads * kPerThread;
    const unsigned blocks =
        static_cast<unsigned>(std::min<unsigned long long>((elems + per_block - 1) / per_block, kMaxBlocks));
    if (check(api_.cuLaunchKernel(fn, blocks, 1, 1, kThreads, 1, 1, 0, stream(st), args, nullptr),
              "cuLaunchKernel(normalize)", why)) {
      return {};
    }
    return base::Status::error(why);
  }

  base::Result<void*> open_memory(int device, const IpcHandle& h, std::size_t bytes) override {
    (void)bytes;
    std::string why;
    Scope s(*this, device, why);
    CUipcMemHandle mh{};
    std::memcpy(mh.reserved, h.data(), sizeof mh.reserved);
    CUdeviceptr p = 0;
    if (!s.ok ||
        !check(api_.cuIpcOpenMemHandle(&p, mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle", why)) {
      return base::Status::error(why);
    }
    return reinterpret_cast<void*>(p);
  }
  void close_memory(int device, void* ptr) override {
    std::string why;
    if (Scope s(*this, device, why); s.ok) api_.cuIpcCloseMemHandle(dptr(ptr));
  }
  base::Result<EventId> open_event(int device, const IpcHandle& h) override {
    std::string why;
    Scope s(*this, device, why);
    CUipcEventHandle eh{};
    std::memcpy(eh.reserved, h.data(), sizeof eh.reserved);
    CUevent e = nullptr;
    if (!s.ok || !check(api_.cuIpcOpenEventHandle(&e, eh), "cuIpcOpenEventHandle", why)) {
      return base::Status::error(why);
    }
    return reinterpret_cast<EventId>(e);
  }
  void close_event(int device, EventId e) override {
    std::string why;
    if (Scope s(*this, device, why); s.ok) api_.cuEventDestroy(event(e));
  }
  base::Status copy_to_host(int device, StreamId st, void* dst, const void* src, std::size_t bytes) override {
    std::string why;
    Scope s(*this, device, why);
    if (s.ok && check(api_.cuMemcpyDtoHAsync(dst, dptr(src), bytes, stream(st)), "cuMemcpyDtoHAsync", why) &&
        check(api_.cuStreamSynchronize(stream(st)), "cuStreamSynchronize", why)) {
      return {};
    }
    return base::Status::error(why);
  }

 private:
  struct DeviceState {
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    bool read_only_register = false;
    CUmodule module = nullptr;  // the normalize kernel, loaded at first use
    CUfunction normalize = nullptr;             // any output type (launched for float16)
    CUfunction normalize_f32 = nullptr;         // float32 output
    std::map<std::string, CUdeviceptr> tables;  // normalize tables by content
  };

  // Makes a device's primary context current for the scope; the previous one is restored.
  struct Scope {
    Scope(CudaDriverBackend& b, int device, std::string& why) : api(b.api_) {
      {
        base::MutexLock lock(b.mu_);
        auto it = b.devices_.find(device);
        if (it == b.devices_.end()) {
          why = "device " + std::to_string(device) + " was not opened (open_device first)";
          return;
        }
        state = &it->second;
      }
      push(state->ctx, why);
    }
    Scope(CudaDriverBackend& b, CUcontext ctx) : api(b.api_) {
      std::string why;
      push(ctx, why);
    }
    void push(CUcontext ctx, std::string& why) {
      const CUresult r = api.cuCtxPushCurrent(ctx);
      ok = r == CUDA_SUCCESS;
      if (!ok) why = error_text(api, "cuCtxPushCurrent", r);
    }
    ~Scope() {
      if (ok) {
        CUcontext popped = nullptr;
        api.cuCtxPopCurrent(&popped);
      }
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    const DriverApi& api;
    DeviceState* state = nullptr;
    bool ok = false;
  };

  // The kernel and a device copy of spec's table (uploaded once per distinct table; jobs
  // have one each). Called inside the device's Scope.
  bool kernel_for(DeviceState& st, const NormalizeSpec& spec, CUfunction& fn, CUdeviceptr& table, std::string& why) {
    base::MutexLock lock(kernel_mu_);
    if (st.module == nullptr) {
      if (!check(api_.cuModuleLoadData(&st.module, kernel_image_), "cuModuleLoadData(normalize)", why)) {
        st.module = nullptr;
        return false;
      }
      if (!check(api_.cuModuleGetFunction(&st.normalize, st.module, kNormalizeKernel), "cuModuleGetFunction", why) ||
          !check(api_.cuModuleGetFunction(&st.normalize_f32, st.module, kNormalizeF32Kernel), "cuModuleGetFunction",
                 why)) {
        // Unloaded again: a module kept without its functions made the next call launch a
        // null function.
        api_.cuModuleUnload(st.module);
        st.module = nullptr;
        st.normalize = nullptr;
        st.normalize_f32 = nullptr;
        return false;
      }
    }
    fn = spec.half() ? st.normalize : st.normalize_f32;
    const std::string key(reinterpret_cast<const char*>(spec.table.data()), sizeof spec.table);
    if (auto it = st.tables.find(key); it != st.tables.end()) {
      table = it->second;
      return true;
    }
    if (!check(api_.cuMemAlloc(&table, sizeof spec.table), "cuMemAlloc(table)", why)) return false;
    if (!check(api_.cuMemcpyHtoD(table, spec.table.data(), sizeof spec.table), "cuMemcpyHtoD(table)", why)) {
      api_.cuMemFree(table);
      return false;
    }
    st.tables.emplace(key, table);
    return true;
  }

  bool check(CUresult r, const char* call, std::string& why) const {
    if (r == CUDA_SUCCESS) return true;
    why = error_text(api_, call, r);
    return false;
  }
  static CUstream stream(StreamId s) { return reinterpret_cast<CUstream>(s); }
  static CUevent event(EventId e) { return reinterpret_cast<CUevent>(e); }
  static CUdeviceptr dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

  const DriverApi& api_;
  const void* kernel_image_;  // fatbin of the normalize kernels, or nullptr (libstoker)
  // Guards devices_ (the map, not the contexts: a DeviceState's address is stable and its
  // ctx never changes once inserted) and registered_. Never held across a driver call
  // other than open_device's, and never together with kernel_mu_.
  base::Mutex mu_;
  // Guards module loads and table uploads: a DeviceState's module, normalize and tables
  // (members of a struct, so not annotated; kernel_for is their only user).
  base::Mutex kernel_mu_;
  std::map<int, DeviceState> devices_ STOKER_GUARDED_BY(mu_);
  std::set<void*> registered_ STOKER_GUARDED_BY(mu_);
};

}  // namespace

BackendResult make_cuda_driver_backend_with_kernels(const void* kernel_image) {
  const base::Result<const cu::DriverApi*> loaded = cu::load_driver();
  if (!loaded) return loaded.status();
  const cu::DriverApi* api = *loaded;
  int n = 0;
  if (const cu::CUresult r = api->cuDeviceGetCount(&n); r != cu::CUDA_SUCCESS || n == 0) {
    return base::Status::error(r != cu::CUDA_SUCCESS ? cu::error_text(*api, "cuDeviceGetCount", r)
                                                     : "the CUDA driver sees no GPU");
  }
  return std::unique_ptr<Backend>(std::make_unique<CudaDriverBackend>(*api, kernel_image));
}

BackendResult make_cuda_driver_backend() { return make_cuda_driver_backend_with_kernels(nullptr); }

}  // namespace stoker::device
