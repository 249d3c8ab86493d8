// The slice of the CUDA driver API that Stoker uses, loaded at run time from libcuda.so.1.
//
// Why not link cudart or libcuda: libstoker goes into trainers whose torch brings its own CUDA
// runtime; a second, newer cudart inside libstoker would demand a newer driver than that torch
// needs and could not share its contexts cleanly. The driver API through dlopen works beside any
// torch build, and a machine without a driver still loads libstoker (and stokerd) and only hears
// "no device".
//
// The types and constants below mirror cuda.h (ABI-stable since CUDA 4; the versioned entry
// points are the `_v2` names cuda.h maps to). cuda_driver_api_check.cpp compares every value
// with cuda.h in builds that have the toolkit, so a mistake here fails the build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.hpp"

namespace stoker::device::cu {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
struct CUuuid { char bytes[16]; };
struct CUipcMemHandle { char reserved[64]; };
struct CUipcEventHandle { char reserved[64]; };

inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
inline constexpr CUresult CUDA_ERROR_NOT_READY = 600;
inline constexpr CUresult CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712;

inline constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_MODE = 20;
inline constexpr int CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41;
inline constexpr int CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED = 113;
inline constexpr int CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED = 125;
inline constexpr int CU_COMPUTEMODE_DEFAULT = 0;
inline constexpr int CU_COMPUTEMODE_PROHIBITED = 2;
inline constexpr int CU_COMPUTEMODE_EXCLUSIVE_PROCESS = 3;
inline constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
inline constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;
inline constexpr unsigned CU_EVENT_INTERPROCESS = 0x4;
inline constexpr unsigned kHostRegisterPortable = 0x01;
inline constexpr unsigned kHostRegisterReadOnly = 0x08;
inline constexpr unsigned CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1;

// Entry points, each resolved by its exported (versioned) name.
struct DriverApi {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetUuid)(CUuuid*, CUdevice);  // cuDeviceGetUuid_v2
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);  // _v2
  CUresult (*cuCtxPushCurrent)(CUcontext);          // _v2
  CUresult (*cuCtxPopCurrent)(CUcontext*);          // _v2
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);            // _v2
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventDestroy)(CUevent);              // _v2
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventQuery)(CUevent);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuMemAlloc)(CUdeviceptr*, std::size_t);  // _v2
  CUresult (*cuMemFree)(CUdeviceptr);                 // _v2
  CUresult (*cuMemGetInfo)(std::size_t*, std::size_t*);  // _v2 (tests and benchmarks)
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, std::size_t, CUstream);  // _v2 (benchmark)
  CUresult (*cuMemHostRegister)(void*, std::size_t, unsigned);  // _v2
  CUresult (*cuMemHostUnregister)(void*);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, std::size_t);                   // _v2
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, std::size_t, CUstream);    // _v2
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, std::size_t, CUstream);          // _v2
  CUresult (*cuIpcGetMemHandle)(CUipcMemHandle*, CUdeviceptr);
  CUresult (*cuIpcOpenMemHandle)(CUdeviceptr*, CUipcMemHandle, unsigned);  // _v2
  CUresult (*cuIpcCloseMemHandle)(CUdeviceptr);
  CUresult (*cuIpcGetEventHandle)(CUipcEventHandle*, CUevent);
  CUresult (*cuIpcOpenEventHandle)(CUevent*, CUipcEventHandle);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**);
};

// Loads libcuda.so.1 once per process and resolves every entry point (the handle is never
// closed: the driver stays loaded for the process's life, as cudart does). The reason instead
// when there is no driver, it is too old, or cuInit fails (no device, driver/kernel module
// mismatch). A held pointer is never null.
base::Result<const DriverApi*> load_driver();

// "cuMemAlloc: out of memory (CUDA_ERROR_OUT_OF_MEMORY = 2)"-style text for a result.
std::string error_text(const DriverApi& api, const char* call, CUresult r);

}  // namespace stoker::device::cu
