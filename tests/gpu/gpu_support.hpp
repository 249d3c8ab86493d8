// Shared by the gpu tier and the GPU benchmark: the `cuda` backend or a skip.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "device/device_backend.hpp"

namespace stoker::gputest {

// Exit status ctest reads as "Skipped" (SKIP_RETURN_CODE in gpu.cmake).
inline constexpr int kSkip = 77;

// stokerd's cuda backend (with the normalize kernel) on device 0, opened; or, without a usable
// GPU, exits 77 - unless STOKER_REQUIRE_GPU=1 (scripts/gpu-check.sh), where that is a failure.
inline std::unique_ptr<device::Backend> cuda_or_skip() {
  auto made = device::make_cuda_daemon_backend();
  std::string why = made.status().message();
  std::unique_ptr<device::Backend> b = made ? std::move(made).value() : nullptr;
  if (b) {
    if (base::Status st = b->open_device(0); !st) {
      why = st.message();
      b.reset();
    }
  }
  if (!b) {
    const char* req = std::getenv("STOKER_REQUIRE_GPU");
    const bool required = req != nullptr && std::string(req) == "1";
    std::fprintf(stderr, "%s: no usable CUDA device: %s\n", required ? "FAILED" : "SKIP", why.c_str());
    std::exit(required ? 1 : kSkip);
  }
  return b;
}

}  // namespace stoker::gputest
