// Built when the CUDA toolkit is absent (or STOKER_CUDA=OFF): device output is unavailable
// and says why; everything else in stokerd is unaffected.
#include "cuda/device_exporter.hpp"

namespace stoker::cuda {

std::unique_ptr<DeviceExporter> DeviceExporter::create(std::string& why_not) {
  why_not = "stokerd was built without CUDA (configure with the CUDA toolkit installed, STOKER_CUDA=ON)";
  return nullptr;
}

}  // namespace stoker::cuda
