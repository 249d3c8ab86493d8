// gpu_test_support.hpp without CUDA: no device, so every gpu test reports itself skipped.
#include <cstdio>
#include <cstdlib>

#include "gpu_test_support.hpp"

namespace stoker::gputest {
namespace {
constexpr const char* kNoCuda = "built without CUDA";
}

int device_count(std::string& why) {
  why = kNoCuda;
  return 0;
}

void skip_without_device() {
  const char* req = std::getenv("STOKER_REQUIRE_GPU");
  const bool required = req != nullptr && std::string(req) == "1";
  std::printf("%s: %s\n", required ? "FAILED: STOKER_REQUIRE_GPU=1 but" : "SKIP", kNoCuda);
  std::fflush(stdout);
  std::_Exit(required ? 1 : 77);
}

bool normalize_on_device(const std::vector<std::uint8_t>&, const NormalizeCase&, std::vector<float>&, std::string& why) {
  why = kNoCuda;
  return false;
}
bool normalize_refuses_misaligned_output() { return false; }
void* stream_create(int, std::string& why) {
  why = kNoCuda;
  return nullptr;
}
void stream_destroy(void*) {}
bool copy_to_host(void*, const void*, std::size_t, void*, std::string& why) {
  why = kNoCuda;
  return false;
}
std::size_t device_free_bytes(int) { return 0; }

}  // namespace stoker::gputest
