// stokerd built without the CUDA toolkit: the cuda backend is unavailable (hostsim still is).
#include "device/device_backend.hpp"

namespace stoker::device {
std::unique_ptr<Backend> make_cuda_runtime_backend(std::string& why_not) {
  why_not = "stokerd was built without CUDA (configure with -DSTOKER_CUDA=ON and CUDA_HOME set)";
  return nullptr;
}
}  // namespace stoker::device
