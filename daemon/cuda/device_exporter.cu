// CUDA implementation of DeviceExporter (see device_exporter.hpp for the model and the rules).
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include <cuda_runtime.h>

#include "cuda/device_exporter.hpp"
#include "cuda/normalize_kernel.cuh"

namespace stoker::cuda {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(proto::SlotHeader{}.device_mem_handle));
static_assert(sizeof(cudaIpcEventHandle_t) == sizeof(proto::SlotHeader{}.device_event_handle));

// Slot copies start on this boundary: vector stores in the kernel, and what frameworks expect.
constexpr std::size_t kDeviceSlotAlign = 256;

std::string err(const std::string& what, cudaError_t e) {
  return what + ": " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")";
}

// Makes `device` current for the calling (daemon-owned) thread. The previous device is not
// restored: restoring an ordinal the thread never chose would create a context on that GPU.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != device) set_ = cudaSetDevice(device);
  }
  cudaError_t status() const { return set_; }

 private:
  cudaError_t set_ = cudaSuccess;
};

struct Ring {
  int device = -1;
  std::size_t slot_stride = 0;       // bytes between slot copies, kDeviceSlotAlign multiple
  std::uint32_t slots = 0;
  void* memory = nullptr;            // slots * slot_stride on `device`, exported
  void* staging = nullptr;           // uint8 input of the normalize kernel
  std::size_t staging_bytes = 0;
  cudaStream_t stream = nullptr;
  cudaIpcMemHandle_t mem_handle{};
  std::vector<cudaEvent_t> events;   // one per slot, interprocess
  std::vector<cudaIpcEventHandle_t> event_handles;
};

class CudaExporter final : public DeviceExporter {
 public:
  ~CudaExporter() override {
    // Errors are ignored: at process exit the CUDA runtime may already be unloading.
    std::lock_guard lock(mu_);
    for (auto& [key, ring] : rings_) release(ring);
    rings_.clear();
    for (void* p : registered_) cudaHostUnregister(p);
    registered_.clear();
  }

  int find_device(const std::uint8_t uuid[16], std::string& why) override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    std::string seen;
    for (int d = 0; d < n; ++d) {
      cudaUUID_t u{};
      if (device_uuid(d, u) != cudaSuccess) continue;
      if (std::memcmp(u.bytes, uuid, 16) == 0) return d;
      seen += (seen.empty() ? "" : ", ") + gpu_uuid_string(reinterpret_cast<const std::uint8_t*>(u.bytes));
    }
    why = "the consumer's GPU " + gpu_uuid_string(uuid) + " is not visible to stokerd, which sees " +
          std::to_string(n) + " device(s)" + (seen.empty() ? "" : " (" + seen + ")") +
          "; run stokerd where that GPU is visible (check its CUDA_VISIBLE_DEVICES)";
    return -1;
  }

  int find_device_by_pci_bus_id(const std::string& bus_id, std::string& why) override {
    int d = -1;
    const cudaError_t e = cudaDeviceGetByPCIBusId(&d, bus_id.c_str());
    if (e != cudaSuccess) {
      cudaGetLastError();
      why = err("no GPU with PCI bus id " + bus_id + " is visible to stokerd", e);
      return -1;
    }
    return d;
  }

  std::string describe_device(int device) override {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
      cudaGetLastError();
      return {};
    }
    char bus[32] = {};
    cudaDeviceGetPCIBusId(bus, sizeof bus, device);
    return std::string(p.name) + ", " + gpu_uuid_string(reinterpret_cast<const std::uint8_t*>(p.uuid.bytes)) +
           ", PCI " + bus;
  }

  bool register_host(void* base, std::size_t bytes, std::string& why) override {
    std::lock_guard lock(mu_);
    // Portable: pinned for every device, whichever GPU a consumer of this job is on.
    const cudaError_t e = cudaHostRegister(base, bytes, cudaHostRegisterPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();
      why = err("cudaHostRegister of " + std::to_string(bytes) + " bytes of shared memory", e);
      return false;
    }
    registered_.push_back(base);
    return true;
  }

  void unregister_host(void* base) override {
    std::lock_guard lock(mu_);
    for (auto it = registered_.begin(); it != registered_.end(); ++it) {
      if (*it == base) {
        // Copies still reading the range must finish first.
        for (auto& [key, ring] : rings_) cudaStreamSynchronize(ring.stream);
        cudaHostUnregister(base);
        registered_.erase(it);
        return;
      }
    }
  }

  bool allocate_ring(RingKey key, int device, std::size_t slot_bytes, std::uint32_t slots,
                     std::string& why) override {
    std::lock_guard lock(mu_);
    const std::size_t stride = (slot_bytes + kDeviceSlotAlign - 1) / kDeviceSlotAlign * kDeviceSlotAlign;
    if (auto it = rings_.find(key); it != rings_.end()) {
      if (it->second.device == device && it->second.slot_stride == stride && it->second.slots == slots) return true;
      release(it->second);
      rings_.erase(it);
    }
    if (slots == 0 || stride == 0) {
      why = "a device ring needs at least one slot of at least one byte";
      return false;
    }
    DeviceScope scope(device);
    Ring ring;
    ring.device = device;
    ring.slot_stride = stride;
    ring.slots = slots;
    cudaError_t e = scope.status();
    if (e == cudaSuccess) e = cudaMalloc(&ring.memory, stride * slots);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&ring.stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaIpcGetMemHandle(&ring.mem_handle, ring.memory);
    for (std::uint32_t s = 0; e == cudaSuccess && s < slots; ++s) {
      cudaEvent_t ev = nullptr;
      e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess);
      if (e != cudaSuccess) break;
      ring.events.push_back(ev);
      cudaIpcEventHandle_t h{};
      e = cudaIpcGetEventHandle(&h, ev);
      ring.event_handles.push_back(h);
    }
    if (e != cudaSuccess) {
      cudaGetLastError();
      why = err("allocating " + std::to_string(stride * slots) + " bytes of device memory for ring " +
                    std::to_string(key.rank) + " of job " + std::to_string(key.job) + " on device " +
                    std::to_string(device),
                e);
      release(ring);
      return false;
    }
    allocated_ += stride * slots;
    rings_.emplace(key, std::move(ring));
    return true;
  }

  void free_ring(RingKey key) override {
    std::lock_guard lock(mu_);
    auto it = rings_.find(key);
    if (it == rings_.end()) return;
    release(it->second);
    rings_.erase(it);
  }

  bool copy_and_publish(RingKey key, std::uint32_t slot, const void* host, std::size_t host_bytes,
                        std::uint32_t count, const DeviceOutputSpec& spec, proto::SlotHeader* out,
                        std::string& why) override {
    std::lock_guard lock(mu_);
    auto it = rings_.find(key);
    if (it == rings_.end() || slot >= it->second.slots) {
      why = "no device memory for slot " + std::to_string(slot) + " of ring " + std::to_string(key.rank) +
            " of job " + std::to_string(key.job);
      return false;
    }
    Ring& ring = it->second;
    const std::uint64_t dev_bytes = device_bytes_for(spec, host_bytes);
    if (dev_bytes > ring.slot_stride) {
      why = "a batch of " + std::to_string(dev_bytes) + " device bytes does not fit the ring's " +
            std::to_string(ring.slot_stride) + "-byte slots";
      return false;
    }
    NormalizeArgs args;
    if (spec.normalize) {
      if (spec.out_dtype == proto::DType::kUInt8 || spec.channels < 1 || spec.channels > kMaxNormalizeChannels) {
        why = "device normalize needs float16/float32 output and 1 to 4 channels";
        return false;
      }
      args.images = count;
      args.channels = spec.channels;
      args.pixels = static_cast<std::size_t>(spec.height) * spec.width;
      args.nhwc = spec.layout == proto::Layout::kNHWC;
      args.out_half = spec.out_dtype == proto::DType::kFloat16;
      for (std::uint32_t c = 0; c < spec.channels; ++c) {
        args.mean[c] = spec.mean[c];
        args.stddev[c] = spec.stddev[c];
      }
      if (static_cast<std::uint64_t>(count) * spec.channels * args.pixels != host_bytes) {
        why = "device normalize: " + std::to_string(host_bytes) + " host bytes are not " + std::to_string(count) +
              " uint8 samples of " + std::to_string(spec.channels) + "x" + std::to_string(spec.height) + "x" +
              std::to_string(spec.width);
        return false;
      }
    }
    DeviceScope scope(ring.device);
    cudaError_t e = scope.status();
    char* dst = static_cast<char*>(ring.memory) + ring.slot_stride * slot;
    if (e == cudaSuccess && !spec.normalize) {
      e = cudaMemcpyAsync(dst, host, host_bytes, cudaMemcpyHostToDevice, ring.stream);
    } else if (e == cudaSuccess) {
      if (ring.staging_bytes < host_bytes) {
        // First normalized batch of the ring (batches never grow): the old buffer, if any, is
        // freed once the work queued on it is done.
        if (ring.staging != nullptr) {
          cudaStreamSynchronize(ring.stream);
          cudaFree(ring.staging);
        }
        ring.staging = nullptr;
        ring.staging_bytes = 0;
        e = cudaMalloc(&ring.staging, host_bytes);
        if (e == cudaSuccess) ring.staging_bytes = host_bytes;
      }
      // One staging buffer per ring is enough: copy and kernel are ordered on the ring's stream.
      if (e == cudaSuccess) e = cudaMemcpyAsync(ring.staging, host, host_bytes, cudaMemcpyHostToDevice, ring.stream);
      if (e == cudaSuccess) e = launch_normalize(static_cast<const std::uint8_t*>(ring.staging), dst, args, ring.stream);
    }
    if (e == cudaSuccess) e = cudaEventRecord(ring.events[slot], ring.stream);
    if (e != cudaSuccess) {
      cudaGetLastError();
      why = err("queuing the copy of a batch to device " + std::to_string(ring.device), e);
      return false;
    }
    std::memcpy(out->device_mem_handle, &ring.mem_handle, sizeof ring.mem_handle);
    std::memcpy(out->device_event_handle, &ring.event_handles[slot], sizeof(cudaIpcEventHandle_t));
    out->device_offset = ring.slot_stride * slot;
    out->device_bytes = dev_bytes;
    return true;
  }

  bool wait_copied(RingKey key, std::uint32_t slot, std::string& why) override {
    cudaEvent_t ev = nullptr;
    int device = -1;
    {
      std::lock_guard lock(mu_);
      auto it = rings_.find(key);
      if (it == rings_.end() || slot >= it->second.slots) return true;  // nothing in flight
      ev = it->second.events[slot];
      device = it->second.device;
    }
    // Outside the lock: other rings keep publishing while this one waits. free_ring of this
    // ring concurrently is excluded by the caller (both happen under the ring's own mutex).
    DeviceScope scope(device);
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaErrorNotReady) e = cudaEventSynchronize(ev);
    if (e != cudaSuccess) {
      cudaGetLastError();
      why = err("waiting for a batch copy to the device", e);
      return false;
    }
    return true;
  }

  std::size_t device_bytes_allocated() const override {
    std::lock_guard lock(mu_);
    return allocated_;
  }

 private:
  static cudaError_t device_uuid(int d, cudaUUID_t& out) {
    cudaDeviceProp p{};
    const cudaError_t e = cudaGetDeviceProperties(&p, d);
    if (e == cudaSuccess) out = p.uuid;
    return e;
  }

  void release(Ring& ring) {  // mu_ held
    if (ring.device >= 0) {
      DeviceScope scope(ring.device);
      if (ring.stream != nullptr) cudaStreamSynchronize(ring.stream);
      for (cudaEvent_t ev : ring.events) cudaEventDestroy(ev);
      if (ring.memory != nullptr) {
        cudaFree(ring.memory);
        allocated_ -= ring.slot_stride * ring.slots;
      }
      if (ring.staging != nullptr) cudaFree(ring.staging);
      if (ring.stream != nullptr) cudaStreamDestroy(ring.stream);
    }
    ring.events.clear();
    ring.event_handles.clear();
    ring.memory = ring.staging = nullptr;
    ring.stream = nullptr;
    cudaGetLastError();
  }

  mutable std::mutex mu_;
  std::map<RingKey, Ring> rings_;   // guarded by mu_
  std::vector<void*> registered_;   // guarded by mu_
  std::size_t allocated_ = 0;       // guarded by mu_; bytes of ring memory
};

}  // namespace

bool DeviceExporter::built_with_cuda() { return true; }

std::unique_ptr<DeviceExporter> DeviceExporter::create(std::string& why_not) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    why_not = e != cudaSuccess ? err("no usable CUDA device", e) : std::string("no CUDA device");
    if (e == cudaErrorInsufficientDriver) {
      why_not += "; no NVIDIA driver is loaded, or it is older than this build's CUDA runtime " +
                 std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
    }
    cudaGetLastError();  // clear the sticky "no device" state
    return nullptr;
  }
  return std::make_unique<CudaExporter>();
}

}  // namespace stoker::cuda
