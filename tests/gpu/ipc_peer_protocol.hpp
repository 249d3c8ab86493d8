// What cuda_backend_test and stoker_gpu_ipc_peer agree on: hex-encoded handles on argv and a
// byte pattern the peer checks.
#pragma once

#include <cstdint>
#include <string>

#include "device/device_backend.hpp"

namespace stoker::gputest {

inline std::uint8_t pattern_byte(std::size_t i) { return static_cast<std::uint8_t>((i * 131) ^ (i >> 9)); }

inline std::string to_hex(const device::IpcHandle& h) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (auto b : h) {
    s += d[b >> 4];
    s += d[b & 15];
  }
  return s;
}

inline bool from_hex(const std::string& s, device::IpcHandle& h) {
  if (s.size() != 2 * h.size()) return false;
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = static_cast<std::uint8_t>(std::stoul(s.substr(2 * i, 2), nullptr, 16));
  return true;
}

}  // namespace stoker::gputest
