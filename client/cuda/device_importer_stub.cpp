#include "cuda/device_importer.hpp"

namespace stoker::cuda {

std::unique_ptr<DeviceImporter> DeviceImporter::create(std::string& why_not) {
  why_not = "libstoker was built without CUDA";
  return nullptr;
}

}  // namespace stoker::cuda
