// Loading the CUDA driver at run time (see cuda_driver_api.hpp for why).
#include <dlfcn.h>

#include <mutex>

#include "device/cuda_driver_api.hpp"

namespace stoker::device::cu {
namespace {

// The oldest driver whose API covers everything in DriverApi (cuDeviceGetUuid_v2: CUDA 11.4).
constexpr int kMinDriverVersion = 11040;

struct Loaded {
  DriverApi api{};
  std::string why_not;
  bool ok = false;
};

template <typename Fn>
bool resolve(void* lib, const char* name, Fn& out, std::string& why) {
  out = reinterpret_cast<Fn>(::dlsym(lib, name));
  if (out == nullptr) why = std::string("libcuda.so.1 has no ") + name + " (driver too old?)";
  return out != nullptr;
}

Loaded load_once() {
  Loaded l;
  // RTLD_NOLOAD first: a trainer's torch has usually loaded the driver already.
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (lib == nullptr) lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = ::dlerror();
    l.why_not = std::string("no CUDA driver (libcuda.so.1: ") + (e ? e : "not found") + ")";
    return l;
  }
  DriverApi& a = l.api;
  std::string& w = l.why_not;
  const bool all =
      resolve(lib, "cuInit", a.cuInit, w) && resolve(lib, "cuDriverGetVersion", a.cuDriverGetVersion, w) &&
      resolve(lib, "cuGetErrorString", a.cuGetErrorString, w) &&
      resolve(lib, "cuDeviceGetCount", a.cuDeviceGetCount, w) && resolve(lib, "cuDeviceGet", a.cuDeviceGet, w) &&
      resolve(lib, "cuDeviceGetName", a.cuDeviceGetName, w) &&
      resolve(lib, "cuDeviceGetUuid_v2", a.cuDeviceGetUuid, w) &&
      resolve(lib, "cuDeviceGetAttribute", a.cuDeviceGetAttribute, w) &&
      resolve(lib, "cuDevicePrimaryCtxRetain", a.cuDevicePrimaryCtxRetain, w) &&
      resolve(lib, "cuDevicePrimaryCtxRelease_v2", a.cuDevicePrimaryCtxRelease, w) &&
      resolve(lib, "cuCtxPushCurrent_v2", a.cuCtxPushCurrent, w) &&
      resolve(lib, "cuCtxPopCurrent_v2", a.cuCtxPopCurrent, w) &&
      resolve(lib, "cuStreamCreate", a.cuStreamCreate, w) &&
      resolve(lib, "cuStreamDestroy_v2", a.cuStreamDestroy, w) &&
      resolve(lib, "cuStreamSynchronize", a.cuStreamSynchronize, w) &&
      resolve(lib, "cuStreamWaitEvent", a.cuStreamWaitEvent, w) &&
      resolve(lib, "cuEventCreate", a.cuEventCreate, w) && resolve(lib, "cuEventDestroy_v2", a.cuEventDestroy, w) &&
      resolve(lib, "cuEventRecord", a.cuEventRecord, w) && resolve(lib, "cuEventQuery", a.cuEventQuery, w) &&
      resolve(lib, "cuEventSynchronize", a.cuEventSynchronize, w) &&
      resolve(lib, "cuMemAlloc_v2", a.cuMemAlloc, w) && resolve(lib, "cuMemFree_v2", a.cuMemFree, w) &&
      resolve(lib, "cuMemGetInfo_v2", a.cuMemGetInfo, w) &&
      resolve(lib, "cuMemcpyDtoDAsync_v2", a.cuMemcpyDtoDAsync, w) &&
      resolve(lib, "cuMemHostRegister_v2", a.cuMemHostRegister, w) &&
      resolve(lib, "cuMemHostUnregister", a.cuMemHostUnregister, w) &&
      resolve(lib, "cuMemcpyHtoD_v2", a.cuMemcpyHtoD, w) &&
      resolve(lib, "cuMemcpyHtoDAsync_v2", a.cuMemcpyHtoDAsync, w) &&
      resolve(lib, "cuMemcpyDtoHAsync_v2", a.cuMemcpyDtoHAsync, w) &&
      resolve(lib, "cuIpcGetMemHandle", a.cuIpcGetMemHandle, w) &&
      resolve(lib, "cuIpcOpenMemHandle_v2", a.cuIpcOpenMemHandle, w) &&
      resolve(lib, "cuIpcCloseMemHandle", a.cuIpcCloseMemHandle, w) &&
      resolve(lib, "cuIpcGetEventHandle", a.cuIpcGetEventHandle, w) &&
      resolve(lib, "cuIpcOpenEventHandle", a.cuIpcOpenEventHandle, w) &&
      resolve(lib, "cuModuleLoadData", a.cuModuleLoadData, w) &&
      resolve(lib, "cuModuleUnload", a.cuModuleUnload, w) &&
      resolve(lib, "cuModuleGetFunction", a.cuModuleGetFunction, w) &&
      resolve(lib, "cuLaunchKernel", a.cuLaunchKernel, w);
  if (!all) return l;
  int version = 0;
  if (a.cuDriverGetVersion(&version) != CUDA_SUCCESS || version < kMinDriverVersion) {
    w = "the CUDA driver reports version " + std::to_string(version / 1000) + "." +
        std::to_string(version % 1000 / 10) + "; Stoker needs 11.4 or newer";
    return l;
  }
  if (const CUresult r = a.cuInit(0); r != CUDA_SUCCESS) {
    w = error_text(a, "cuInit", r);
    return l;
  }
  l.ok = true;
  return l;
}

}  // namespace

base::Result<const DriverApi*> load_driver() {
  static const Loaded loaded = load_once();
  if (!loaded.ok) return base::Status::error(loaded.why_not);
  return &loaded.api;
}

std::string error_text(const DriverApi& api, const char* call, CUresult r) {
  const char* s = nullptr;
  if (api.cuGetErrorString == nullptr || api.cuGetErrorString(r, &s) != CUDA_SUCCESS || s == nullptr) {
    s = "unknown error";
  }
  return std::string(call) + ": " + s + " (CUresult " + std::to_string(r) + ")";
}

}  // namespace stoker::device::cu
