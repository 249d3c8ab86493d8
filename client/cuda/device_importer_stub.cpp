// Linked when libstoker is built without the CUDA toolkit: device batches are unavailable and
// every entry point says why.
#include "cuda/device_importer.hpp"

namespace stoker::cuda {
namespace {
constexpr const char* kNoCuda = "libstoker was built without CUDA (configure with the CUDA toolkit installed and -DSTOKER_CUDA=ON)";
}

bool DeviceImporter::built_with_cuda() { return false; }

bool DeviceImporter::device_uuid(int, std::uint8_t*, std::string& why) {
  why = kNoCuda;
  return false;
}

std::unique_ptr<DeviceImporter> DeviceImporter::create(int, std::string& why_not) {
  why_not = kNoCuda;
  return nullptr;
}

}  // namespace stoker::cuda
