// Linked when stokerd is built without the CUDA toolkit (or STOKER_CUDA=OFF): device output is
// unavailable and says why; everything else in stokerd is unaffected.
#include "cuda/device_exporter.hpp"

namespace stoker::cuda {

bool DeviceExporter::built_with_cuda() { return false; }

std::unique_ptr<DeviceExporter> DeviceExporter::create(std::string& why_not) {
  why_not = "stokerd was built without CUDA (configure with the CUDA toolkit installed and -DSTOKER_CUDA=ON)";
  return nullptr;
}

}  // namespace stoker::cuda
