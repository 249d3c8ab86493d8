// CUDA implementation of DeviceExporter (see device_exporter.hpp).
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

std::string err(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorString(e);
}

struct Ring {
  int device = -1;
  void* memory = nullptr;     // slots * slot_bytes on `device`
  void* staging = nullptr;    // uint8 staging for device-side normalize (slot_bytes / dtype)
  std::size_t slot_bytes = 0;
  cudaStream_t stream = nullptr;
  cudaIpcMemHandle_t mem_handle{};
  std::vector<cudaEvent_t> events;
  std::vector<cudaIpcEventHandle_t> event_handles;
};

class CudaExporter final : public DeviceExporter {
 public:
  ~CudaExporter() override {
    for (auto& [r, ring] : rings_) release(ring);
    for (void* p : registered_) cudaHostUnregister(p);
  }

  int find_device(const std::uint8_t uuid[16], std::string& why) override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    for (int d = 0; d < n; ++d) {
      cudaDeviceProp p{};
      if (cudaGetDeviceProperties(&p, d) == cudaSuccess && std::memcmp(p.uuid.bytes, uuid, 16) == 0) return d;
    }
    why = "the consumer's GPU (UUID " + hex(uuid) + ") is not visible to stokerd, which sees " +
          std::to_string(n) + " device(s); check the daemon's CUDA_VISIBLE_DEVICES";
    return -1;
  }

  bool register_host(void* base, std::size_t bytes, std::string& why) override {
    std::lock_guard lock(mu_);
    const cudaError_t e = cudaHostRegister(base, bytes, cudaHostRegisterPortable);
    if (e != cudaSuccess) {
      why = err("cudaHostRegister of the shared-memory segment", e);
      return false;
    }
    registered_.push_back(base);
    return true;
  }

  bool allocate_ring(std::uint32_t r, int device, std::size_t slot_bytes, std::uint32_t slots,
                     std::string& why) override {
    std::lock_guard lock(mu_);
    auto it = rings_.find(r);
    if (it != rings_.end()) {
      if (it->second.device == device && it->second.slot_bytes == slot_bytes) return true;
      release(it->second);
      rings_.erase(it);
    }
    Ring ring;
    ring.device = device;
    ring.slot_bytes = slot_bytes;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaMalloc(&ring.memory, slot_bytes * slots);
    if (e == cudaSuccess) e = cudaMalloc(&ring.staging, slot_bytes);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&ring.stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaIpcGetMemHandle(&ring.mem_handle, ring.memory);
    for (std::uint32_t s = 0; e == cudaSuccess && s < slots; ++s) {
      cudaEvent_t ev;
      e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess);
      if (e != cudaSuccess) break;
      ring.events.push_back(ev);
      cudaIpcEventHandle_t h;
      e = cudaIpcGetEventHandle(&h, ev);
      ring.event_handles.push_back(h);
    }
    if (e != cudaSuccess) {
      why = err("allocating device memory for a consumer ring", e);
      release(ring);
      return false;
    }
    rings_.emplace(r, std::move(ring));
    return true;
  }

  void free_ring(std::uint32_t r) override {
    std::lock_guard lock(mu_);
    auto it = rings_.find(r);
    if (it == rings_.end()) return;
    release(it->second);
    rings_.erase(it);
  }

  bool publish(std::uint32_t r, std::uint32_t slot, const void* host, std::size_t bytes,
               std::uint32_t count, const DeviceNormalize& norm, proto::SlotHeader* header,
               std::string& why) override {
    std::lock_guard lock(mu_);
    auto it = rings_.find(r);
    if (it == rings_.end() || slot >= it->second.events.size()) {
      why = "no device memory for this ring";
      return false;
    }
    Ring& ring = it->second;
    cudaSetDevice(ring.device);
    char* dst = static_cast<char*>(ring.memory) + ring.slot_bytes * slot;
    cudaError_t e;
    if (!norm.enabled) {
      e = cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, ring.stream);
    } else {
      e = cudaMemcpyAsync(ring.staging, host, bytes, cudaMemcpyHostToDevice, ring.stream);
      float inv_std[3];
      for (int c = 0; c < 3; ++c) inv_std[c] = 1.0f / norm.stddev[c];
      if (e == cudaSuccess) {
        e = launch_normalize(static_cast<const std::uint8_t*>(ring.staging), dst,
                             static_cast<std::size_t>(norm.height) * norm.width, count,
                             norm.layout == proto::Layout::kNHWC, norm.out_dtype == proto::DType::kFloat16,
                             norm.mean.data(), inv_std, ring.stream);
      }
    }
    if (e == cudaSuccess) e = cudaEventRecord(ring.events[slot], ring.stream);
    if (e != cudaSuccess) {
      why = err("copying a batch to the device", e);
      return false;
    }
    std::memcpy(header->device_mem_handle, &ring.mem_handle, sizeof ring.mem_handle);
    std::memcpy(header->device_event_handle, &ring.event_handles[slot], sizeof(cudaIpcEventHandle_t));
    header->device_offset = ring.slot_bytes * slot;
    header->device_bytes = norm.enabled ? bytes * proto::dtype_size(norm.out_dtype) : bytes;
    return true;
  }

 private:
  static std::string hex(const std::uint8_t* u) {
    static const char* k = "0123456789abcdef";
    std::string s;
    for (int i = 0; i < 16; ++i) {
      s += k[u[i] >> 4];
      s += k[u[i] & 15];
    }
    return s;
  }

  static void release(Ring& ring) {
    if (ring.device >= 0) cudaSetDevice(ring.device);
    if (ring.stream != nullptr) cudaStreamSynchronize(ring.stream);
    for (auto ev : ring.events) cudaEventDestroy(ev);
    ring.events.clear();
    if (ring.memory != nullptr) cudaFree(ring.memory);
    if (ring.staging != nullptr) cudaFree(ring.staging);
    if (ring.stream != nullptr) cudaStreamDestroy(ring.stream);
    ring.memory = ring.staging = nullptr;
    ring.stream = nullptr;
  }

  std::mutex mu_;
  std::map<std::uint32_t, Ring> rings_;  // guarded by mu_
  std::vector<void*> registered_;        // guarded by mu_
};

}  // namespace

std::unique_ptr<DeviceExporter> DeviceExporter::create(std::string& why_not) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    why_not = e != cudaSuccess ? err("no usable CUDA device", e) : "no CUDA device";
    cudaGetLastError();  // clear the sticky "no device" state
    return nullptr;
  }
  return std::make_unique<CudaExporter>();
}

}  // namespace stoker::cuda
