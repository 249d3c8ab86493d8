// The one interface between Stoker and a device API. stokerd (exporter side) and libstoker
// (importer side) both go through it, so the whole device path - handshake, ring lifecycle,
// fences, re-copies, restarts - runs in CI against the host simulation (`hostsim`), and the
// CUDA implementations are the only code that needs a GPU.
//
// Implementations:
//  - "hostsim" (hostsim_backend.cpp, every build): device memory and events are POSIX shared
//    memory objects, streams are worker threads, the device list is fake and per process
//    (STOKER_HOSTSIM_DEVICES). It aborts on what CUDA leaves undefined: freeing memory or an
//    event a live peer still has open, overwriting device memory a peer still reads (its
//    release fence has not completed), closing a handle twice, touching a device nobody named.
//  - "cuda" (device/cuda_driver_backend.cpp): the CUDA driver API loaded at run time
//    (dlopen libcuda.so.1), so libstoker carries no CUDA runtime and works beside any torch
//    build. stokerd uses the same implementation, given the normalize kernel's image
//    (daemon/cuda/cuda_backend.cpp, a fatbin built by nvcc when the toolkit is present).
// STOKER_DEVICE_BACKEND=hostsim|cuda|none picks one in both processes (default: cuda).
//
// Rules every caller keeps (and hostsim checks):
//  - open_device(d) is the only call that may touch device d first (creates/retains its
//    context); every other call names a device that was opened.
//  - Device memory and events are freed/destroyed by their creator only after every peer that
//    opened them closed them or is gone.
//  - Ordering across processes is on the device: record(event, stream) on one side,
//    stream_wait(stream, event) on the other. Nothing here waits on the host except
//    synchronize_*() and copy_to_host().
//
// Plain C++17 without device headers (the .cu implementation includes it). Thread-safety:
// every method may be called from any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.hpp"

namespace stoker::device {

// Bytes that let another process open an allocation or an event (cudaIpcMemHandle_t and
// cudaIpcEventHandle_t are 64 bytes; hostsim writes its object name there).
using IpcHandle = std::array<std::uint8_t, 64>;
using Uuid = std::array<std::uint8_t, 16>;

// Opaque per-backend objects (a cudaStream_t / CUevent / hostsim object pointer).
using StreamId = std::uintptr_t;
using EventId = std::uintptr_t;
inline constexpr StreamId kDefaultStream = 0;  // the device's default stream (importer side)

enum class BackendKind : std::uint32_t { kNone = 0, kCuda = 1, kHostSim = 2 };
const char* to_string(BackendKind k);

struct DeviceInfo {
  int ordinal = -1;  // as this process numbers devices (after its CUDA_VISIBLE_DEVICES)
  Uuid uuid{};
  std::string name;  // "NVIDIA H100 80GB HBM3" / "hostsim device 1"
};

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", nvidia-smi's spelling; parse is its inverse.
std::string uuid_string(const Uuid& u);
bool parse_uuid(const std::string& text, Uuid& out);

// An interprocess event and the handle another process opens it by (create_ipc_event).
struct IpcEvent {
  EventId event = 0;
  IpcHandle handle{};
};

struct DeviceBuffer {
  int device = -1;
  void* ptr = nullptr;        // device address (hostsim: host address of the object's data)
  std::size_t bytes = 0;
  IpcHandle handle{};         // exported for other processes
  std::uintptr_t impl = 0;    // backend bookkeeping
};

// uint8 samples -> (x/255 - mean[c]) / std[c] through a per-channel table the caller builds
// (the same table the CPU writer uses, so device and host outputs are equal).
struct NormalizeSpec {
  std::uint32_t out_dtype = 3;  // proto::DType: 2 float16, 3 float32
  std::uint32_t layout = 1;     // proto::Layout: 1 NCHW, 2 NHWC
  std::uint32_t channels = 3;   // 1..4
  std::uint32_t height = 0, width = 0;
  // table[c][v]: float32 bits when out_dtype is float32, float16 bits in the low half else.
  std::array<std::array<std::uint32_t, 256>, 4> table{};

  bool half() const { return out_dtype == 2; }             // float16 output, else float32
  std::size_t out_size() const { return half() ? 2 : 4; }  // bytes an output element
};

// What Backend::devices() found: the devices it could read and, when some (or all) could not
// be, why. Both at once (a partial list is still worth having), so a value, not a Result.
struct DeviceList {
  std::vector<DeviceInfo> devices;
  std::string skipped;  // empty: every device was read
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  // What the daemon logs at start beside the device list ("CUDA driver 12.8").
  virtual std::string version() const { return {}; }
  // Whether normalize() can run here (a stokerd built without nvcc has no kernel); else why.
  virtual base::Status can_normalize() const { return {}; }

  // --- both sides ---
  // Devices this process sees, without creating any context.
  virtual DeviceList devices() = 0;
  // Makes `device` usable by this process (context); refuses a device that cannot serve
  // IPC (no IPC support, compute mode EXCLUSIVE_PROCESS or PROHIBITED) with the reason.
  virtual base::Status open_device(int device) = 0;
  virtual base::Result<StreamId> create_stream(int device) = 0;
  virtual void destroy_stream(int device, StreamId s) = 0;
  virtual base::Status record(int device, EventId e, StreamId s) = 0;
  virtual base::Status stream_wait(int device, StreamId s, EventId e) = 0;
  // Host waits (off the hot paths: teardown, tests, the simulated Loader).
  virtual base::Status synchronize_stream(int device, StreamId s) = 0;
  virtual base::Status synchronize_event(int device, EventId e) = 0;
  // true when the event's last record has completed (or it was never recorded).
  virtual bool event_done(int device, EventId e) = 0;
  // Page-locks [p, p + bytes) for asynchronous copies (the job's segment in stokerd; a
  // trainer's mapped ring for pin_memory), in `device`'s context (an opened device: never a
  // context on a GPU nobody named); portable: usable from every device's context, so a range is
  // registered once. `read_only`: the device only reads it.
  virtual base::Status register_host(int device, void* p, std::size_t bytes, bool read_only) = 0;
  virtual void unregister_host(int device, void* p) = 0;

  // --- exporter (stokerd) ---
  virtual base::Result<DeviceBuffer> allocate(int device, std::size_t bytes) = 0;
  virtual void free(DeviceBuffer& b) = 0;  // caller: no peer has it open any more
  virtual base::Result<IpcEvent> create_ipc_event(int device) = 0;
  virtual void destroy_event(int device, EventId e) = 0;
  virtual base::Status copy_to_device(StreamId s, const DeviceBuffer& dst, std::size_t dst_offset,
                                      const void* src, std::size_t bytes) = 0;
  // src: `count` uint8 samples at src_offset of `src`; dst: normalized samples.
  virtual base::Status normalize(StreamId s, const DeviceBuffer& dst, std::size_t dst_offset,
                                 const DeviceBuffer& src, std::size_t src_offset, std::uint32_t count,
                                 const NormalizeSpec& spec) = 0;

  // --- importer (libstoker) ---
  // The device address of another process's allocation of at least `bytes`.
  virtual base::Result<void*> open_memory(int device, const IpcHandle& h, std::size_t bytes) = 0;
  virtual void close_memory(int device, void* ptr) = 0;
  virtual base::Result<EventId> open_event(int device, const IpcHandle& h) = 0;
  virtual void close_event(int device, EventId e) = 0;
  // Blocking copy of device bytes to host memory, ordered after `s`'s work (stokerctl --dump,
  // the simulated Loader).
  virtual base::Status copy_to_host(int device, StreamId s, void* dst, const void* src,
                                    std::size_t bytes) = 0;
  // Whether device pointers can be read by the CPU (hostsim: yes; cuda: no).
  virtual bool host_addressable() const = 0;

  // Race annotations for the simulation (no-ops on CUDA): the importer says that [ptr, ptr +
  // bytes) is read by the work queued on `s` from now on, and that the reads end with the work
  // queued on `s` so far. hostsim aborts when the exporter writes a range whose reads began
  // and have not ended.
  virtual void annotate_read_begin(int device, const void* ptr, std::size_t bytes, StreamId s) { (void)device, (void)ptr, (void)bytes, (void)s; }
  virtual void annotate_read_end(int device, const void* ptr, std::size_t bytes, StreamId s) { (void)device, (void)ptr, (void)bytes, (void)s; }
};

// A backend, or why there is none here (no driver, no device, built without CUDA, "none").
// A held backend is never null.
using BackendResult = base::Result<std::unique_ptr<Backend>>;

// The backend STOKER_DEVICE_BACKEND names (hostsim | cuda | none; default cuda), for the
// exporter (stokerd) or the importer (libstoker) side.
// make_exporter_backend lives in stokerd (daemon/delivery/exporter_backend.cpp), which can use
// the CUDA runtime; make_importer_backend in libstoker (device/device_common.cpp).
BackendResult make_exporter_backend();
BackendResult make_importer_backend();
// The kind STOKER_DEVICE_BACKEND asks for, for messages.
BackendKind requested_backend();
// The backend STOKER_DEVICE_BACKEND names, with `cuda` as the CUDA implementation.
using CudaFactory = BackendResult (*)();
BackendResult make_backend(CudaFactory cuda);

// Implementations (defined in their own files; factories above pick one).
BackendResult make_hostsim_backend();
BackendResult make_cuda_driver_backend();  // libstoker: no kernels
// `kernel_image`: a fatbin holding stoker_normalize_table (nullptr: normalize unavailable).
BackendResult make_cuda_driver_backend_with_kernels(const void* kernel_image);
BackendResult make_cuda_daemon_backend();  // stokerd (daemon/cuda)

}  // namespace stoker::device
