#include <cstring>
#include <map>
#include <mutex>

#include <cuda_runtime.h>

#include "cuda/device_importer.hpp"

namespace stoker::cuda {
namespace {

struct Key {
  std::uint8_t bytes[64];
  bool operator<(const Key& o) const { return std::memcmp(bytes, o.bytes, 64) < 0; }
};

class CudaImporter final : public DeviceImporter {
 public:
  ~CudaImporter() override { drop(); }

  bool device_uuid(int ordinal, std::uint8_t out[16], std::string& why) override {
    cudaDeviceProp p{};
    const cudaError_t e = cudaGetDeviceProperties(&p, ordinal);
    if (e != cudaSuccess) {
      why = std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(e);
      return false;
    }
    std::memcpy(out, p.uuid.bytes, 16);
    return true;
  }

  void* map(const proto::SlotHeader& h, std::uint64_t generation, void* stream, std::string& why) override {
    std::lock_guard lock(mu_);
    if (generation != generation_) {  // the daemon restarted: every handle is stale
      drop();
      generation_ = generation;
    }
    Key mk{};
    std::memcpy(mk.bytes, h.device_mem_handle, 64);
    auto m = memory_.find(mk);
    if (m == memory_.end()) {
      cudaIpcMemHandle_t handle;
      std::memcpy(&handle, h.device_mem_handle, sizeof handle);
      void* p = nullptr;
      const cudaError_t e = cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess);
      if (e != cudaSuccess) {
        why = std::string("cudaIpcOpenMemHandle: ") + cudaGetErrorString(e);
        return nullptr;
      }
      m = memory_.emplace(mk, p).first;
    }
    Key ek{};
    std::memcpy(ek.bytes, h.device_event_handle, 64);
    auto ev = events_.find(ek);
    if (ev == events_.end()) {
      cudaIpcEventHandle_t handle;
      std::memcpy(&handle, h.device_event_handle, sizeof handle);
      cudaEvent_t e{};
      const cudaError_t rc = cudaIpcOpenEventHandle(&e, handle);
      if (rc != cudaSuccess) {
        why = std::string("cudaIpcOpenEventHandle: ") + cudaGetErrorString(rc);
        return nullptr;
      }
      ev = events_.emplace(ek, e).first;
    }
    const cudaError_t rc = cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), ev->second, 0);
    if (rc != cudaSuccess) {
      why = std::string("cudaStreamWaitEvent: ") + cudaGetErrorString(rc);
      return nullptr;
    }
    return static_cast<char*>(m->second) + h.device_offset;
  }

 private:
  void drop() {
    for (auto& [k, p] : memory_) cudaIpcCloseMemHandle(p);
    for (auto& [k, e] : events_) cudaEventDestroy(e);
    memory_.clear();
    events_.clear();
  }

  std::mutex mu_;
  std::uint64_t generation_ = 0;
  std::map<Key, void*> memory_;
  std::map<Key, cudaEvent_t> events_;
};

}  // namespace

std::unique_ptr<DeviceImporter> DeviceImporter::create(std::string& why_not) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    why_not = e != cudaSuccess ? std::string("no usable CUDA device: ") + cudaGetErrorString(e) : "no CUDA device";
    cudaGetLastError();
    return nullptr;
  }
  return std::make_unique<CudaImporter>();
}

}  // namespace stoker::cuda
