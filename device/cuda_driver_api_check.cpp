// Compiled only in builds that have the CUDA toolkit: every type and constant that
// cuda_driver_api.hpp copies from cuda.h is compared with the real header, and every entry
// point's versioned name is resolved by dlsym at run time (cuda_driver_api.cpp).
#include <cuda.h>

#include <type_traits>

#include "device/cuda_driver_api.hpp"

namespace c = stoker::device::cu;

static_assert(sizeof(c::CUdeviceptr) == sizeof(::CUdeviceptr));
static_assert(sizeof(c::CUuuid) == sizeof(::CUuuid));
static_assert(sizeof(c::CUipcMemHandle) == sizeof(::CUipcMemHandle));
static_assert(sizeof(c::CUipcEventHandle) == sizeof(::CUipcEventHandle));
static_assert(c::CUDA_SUCCESS == ::CUDA_SUCCESS);
static_assert(c::CUDA_ERROR_INVALID_VALUE == ::CUDA_ERROR_INVALID_VALUE);
static_assert(c::CUDA_ERROR_NOT_READY == ::CUDA_ERROR_NOT_READY);
static_assert(c::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED == ::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
static_assert(c::CU_DEVICE_ATTRIBUTE_COMPUTE_MODE == ::CU_DEVICE_ATTRIBUTE_COMPUTE_MODE);
static_assert(c::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING == ::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
static_assert(c::CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED ==
              ::CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED);
static_assert(c::CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED == ::CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED);
static_assert(c::CU_COMPUTEMODE_DEFAULT == ::CU_COMPUTEMODE_DEFAULT);
static_assert(c::CU_COMPUTEMODE_PROHIBITED == ::CU_COMPUTEMODE_PROHIBITED);
static_assert(c::CU_COMPUTEMODE_EXCLUSIVE_PROCESS == ::CU_COMPUTEMODE_EXCLUSIVE_PROCESS);
static_assert(c::CU_STREAM_NON_BLOCKING == ::CU_STREAM_NON_BLOCKING);
static_assert(c::CU_EVENT_DISABLE_TIMING == ::CU_EVENT_DISABLE_TIMING);
static_assert(c::CU_EVENT_INTERPROCESS == ::CU_EVENT_INTERPROCESS);
static_assert(c::kHostRegisterPortable == CU_MEMHOSTREGISTER_PORTABLE);
static_assert(c::kHostRegisterReadOnly == CU_MEMHOSTREGISTER_READ_ONLY);
static_assert(c::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS == ::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
