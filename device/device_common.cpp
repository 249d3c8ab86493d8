// Helpers shared by every backend: names, UUID spelling, the STOKER_DEVICE_BACKEND choice.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "device/device_backend.hpp"

namespace stoker::device {

const char* to_string(BackendKind k) {
  switch (k) {
    case BackendKind::kCuda: return "cuda";
    case BackendKind::kHostSim: return "hostsim";
    case BackendKind::kNone: break;
  }
  return "none";
}

std::string uuid_string(const Uuid& u) {
  char s[48];
  std::snprintf(s, sizeof s,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return s;
}

bool parse_uuid(const std::string& text, Uuid& out) {
  std::string hex;
  std::size_t i = text.rfind("GPU-", 0) == 0 ? 4 : 0;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '-') continue;
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    hex += c;
  }
  if (hex.size() != 32) return false;
  for (std::size_t b = 0; b < 16; ++b) {
    out[b] = static_cast<std::uint8_t>(std::strtoul(hex.substr(2 * b, 2).c_str(), nullptr, 16));
  }
  return true;
}

BackendKind requested_backend() {
  const char* v = std::getenv("STOKER_DEVICE_BACKEND");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "cuda") == 0) return BackendKind::kCuda;
  if (std::strcmp(v, "hostsim") == 0) return BackendKind::kHostSim;
  return BackendKind::kNone;
}

BackendResult make_backend(CudaFactory cuda) {
  const char* v = std::getenv("STOKER_DEVICE_BACKEND");
  switch (requested_backend()) {
    case BackendKind::kHostSim: return make_hostsim_backend();
    case BackendKind::kCuda: return cuda();
    case BackendKind::kNone: break;
  }
  return base::Status::error(v != nullptr && std::strcmp(v, "none") == 0
                                 ? "STOKER_DEVICE_BACKEND=none"
                                 : std::string("STOKER_DEVICE_BACKEND='") + (v ? v : "") +
                                       "' is not one of cuda, hostsim, none");
}

BackendResult make_importer_backend() { return make_backend(&make_cuda_driver_backend); }

}  // namespace stoker::device
