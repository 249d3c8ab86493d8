// Plain C++ helpers of the exporter interface, built with and without CUDA.
#include "cuda/device_exporter.hpp"

namespace stoker::cuda {

std::string gpu_uuid_string(const std::uint8_t uuid[16]) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += kHex[uuid[i] >> 4];
    s += kHex[uuid[i] & 15];
  }
  return s;
}

}  // namespace stoker::cuda
