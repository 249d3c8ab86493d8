// Placeholder until the driver-API importer lands: reports that CUDA is unavailable.
#include "device/device_backend.hpp"

namespace stoker::device {
std::unique_ptr<Backend> make_cuda_driver_backend(std::string& why_not) {
  why_not = "the CUDA driver backend is not built into this libstoker";
  return nullptr;
}
}  // namespace stoker::device
