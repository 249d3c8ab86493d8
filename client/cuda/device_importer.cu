// CUDA implementation of DeviceImporter (see device_importer.hpp).
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include <cuda_runtime.h>

#include "cuda/device_importer.hpp"

namespace stoker::cuda {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(proto::SlotHeader{}.device_mem_handle));
static_assert(sizeof(cudaIpcEventHandle_t) == sizeof(proto::SlotHeader{}.device_event_handle));

std::string err(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")";
}

// The handle bytes as a map key.
struct HandleKey {
  std::uint8_t bytes[64];
  bool operator<(const HandleKey& o) const { return std::memcmp(bytes, o.bytes, sizeof bytes) < 0; }
};

HandleKey key_of(const std::uint8_t (&h)[64]) {
  HandleKey k;
  std::memcpy(k.bytes, h, sizeof k.bytes);
  return k;
}

// Makes `device` current for the call and restores the trainer thread's current device after
// it, when it was a different one. (A thread that never chose a device reports 0: restoring
// that creates a context on GPU 0, so trainers should set their device first, as frameworks do.)
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) {
      set_ = cudaSetDevice(device);
      changed_ = set_ == cudaSuccess && previous_ >= 0;
    }
  }
  ~DeviceScope() {
    if (changed_) cudaSetDevice(previous_);
  }
  cudaError_t status() const { return set_; }

 private:
  int previous_ = -1;
  bool changed_ = false;
  cudaError_t set_ = cudaSuccess;
};

class CudaImporter final : public DeviceImporter {
 public:
  explicit CudaImporter(int device) : device_(device) {}
  ~CudaImporter() override {
    std::lock_guard lock(mu_);
    close_all();
  }

  int device() const override { return device_; }

  void* map(const proto::SlotHeader& shared, std::uint64_t generation, void* stream,
            std::string& why) override {
    // The header lives in shared memory: read it once.
    proto::SlotHeader h;
    std::memcpy(&h, &shared, sizeof h);
    if (h.device_bytes == 0) {
      why = "the slot has no device copy (device_bytes is 0)";
      return nullptr;
    }
    std::lock_guard lock(mu_);
    if (generation_ != generation) {  // a restarted daemon: every cached handle is stale
      close_all();
      generation_ = generation;
    }
    DeviceScope scope(device_);
    if (scope.status() != cudaSuccess) {
      why = err("selecting the trainer's device", scope.status());
      return nullptr;
    }
    const HandleKey mk = key_of(h.device_mem_handle);
    auto m = memory_.find(mk);
    if (m == memory_.end()) {
      cudaIpcMemHandle_t handle;
      std::memcpy(&handle, h.device_mem_handle, sizeof handle);
      void* p = nullptr;
      const cudaError_t e = cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess);
      if (e != cudaSuccess) {
        cudaGetLastError();
        why = err("cudaIpcOpenMemHandle of a batch published by stokerd", e);
        return nullptr;
      }
      m = memory_.emplace(mk, p).first;
    }
    const HandleKey ek = key_of(h.device_event_handle);
    auto ev = events_.find(ek);
    if (ev == events_.end()) {
      cudaIpcEventHandle_t handle;
      std::memcpy(&handle, h.device_event_handle, sizeof handle);
      cudaEvent_t e = nullptr;
      const cudaError_t rc = cudaIpcOpenEventHandle(&e, handle);
      if (rc != cudaSuccess) {
        cudaGetLastError();
        why = err("cudaIpcOpenEventHandle of a batch published by stokerd", rc);
        return nullptr;
      }
      ev = events_.emplace(ek, e).first;
    }
    const cudaError_t rc = cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), ev->second, 0);
    if (rc != cudaSuccess) {
      cudaGetLastError();
      why = err("cudaStreamWaitEvent on a batch's copy", rc);
      return nullptr;
    }
    return static_cast<char*>(m->second) + h.device_offset;
  }

  bool finish_reading(void* stream, std::string& why) override {
    DeviceScope scope(device_);
    const cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
    if (e != cudaSuccess) {
      cudaGetLastError();
      why = err("waiting for the trainer's stream before releasing a batch", e);
      return false;
    }
    return true;
  }

  void drop_all() override {
    std::lock_guard lock(mu_);
    close_all();
    generation_.reset();
  }

  std::size_t open_memory_handles() const override {
    std::lock_guard lock(mu_);
    return memory_.size();
  }
  std::size_t open_event_handles() const override {
    std::lock_guard lock(mu_);
    return events_.size();
  }

 private:
  void close_all() {  // mu_ held
    if (memory_.empty() && events_.empty()) return;
    DeviceScope scope(device_);
    for (auto& [k, p] : memory_) cudaIpcCloseMemHandle(p);
    for (auto& [k, e] : events_) cudaEventDestroy(e);
    memory_.clear();
    events_.clear();
    cudaGetLastError();
  }

  const int device_;
  mutable std::mutex mu_;
  std::optional<std::uint64_t> generation_;   // guarded by mu_
  std::map<HandleKey, void*> memory_;         // guarded by mu_; ring allocations
  std::map<HandleKey, cudaEvent_t> events_;   // guarded by mu_; slot events
};

}  // namespace

bool DeviceImporter::built_with_cuda() { return true; }

bool DeviceImporter::device_uuid(int ordinal, std::uint8_t out[16], std::string& why) {
  cudaDeviceProp p{};
  const cudaError_t e = cudaGetDeviceProperties(&p, ordinal);
  if (e != cudaSuccess) {
    cudaGetLastError();
    why = err(("no usable CUDA device " + std::to_string(ordinal)).c_str(), e);
    return false;
  }
  std::memcpy(out, p.uuid.bytes, 16);
  return true;
}

std::unique_ptr<DeviceImporter> DeviceImporter::create(int ordinal, std::string& why_not) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    why_not = e != cudaSuccess ? err("no usable CUDA device", e) : std::string("no CUDA device");
    if (e == cudaErrorInsufficientDriver) {
      why_not += "; no NVIDIA driver is loaded, or it is older than this build's CUDA runtime " +
                 std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
    }
    cudaGetLastError();
    return nullptr;
  }
  if (ordinal < 0 || ordinal >= n) {
    why_not = "CUDA device " + std::to_string(ordinal) + " does not exist (this process sees " + std::to_string(n) + ")";
    return nullptr;
  }
  return std::make_unique<CudaImporter>(ordinal);
}

}  // namespace stoker::cuda
