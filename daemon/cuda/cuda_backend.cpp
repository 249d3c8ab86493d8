// stokerd's `cuda` backend: the driver-API backend (device/cuda_driver_backend.cpp) given
// the normalize kernel's fatbin when this build had nvcc, else without it (copies work, a job
// asking for device_normalize is refused with the reason).
#include "device/device_backend.hpp"

#ifdef STOKER_HAVE_NORMALIZE_FATBIN
extern const unsigned char stoker_normalize_fatbin[];
#endif

namespace stoker::device {

BackendResult make_cuda_daemon_backend() {
#ifdef STOKER_HAVE_NORMALIZE_FATBIN
  return make_cuda_driver_backend_with_kernels(stoker_normalize_fatbin);
#else
  return make_cuda_driver_backend_with_kernels(nullptr);
#endif
}

}  // namespace stoker::device
