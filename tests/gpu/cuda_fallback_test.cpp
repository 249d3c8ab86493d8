// unit tier (runs everywhere): what the `cuda` backend does on a machine without a GPU, and
// that a build with nvcc embedded a loadable normalize kernel image.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "device/cuda_driver_api.hpp"
#include "device/device_backend.hpp"

#ifdef STOKER_HAVE_NORMALIZE_FATBIN
extern const unsigned char stoker_normalize_fatbin[];
extern const std::size_t stoker_normalize_fatbin_size;
#endif

using namespace stoker;

TEST_CASE("without a usable driver the cuda backend is unavailable with a reason, on both sides") {
  const auto driver = device::cu::load_driver();
  const device::cu::DriverApi* api = driver ? *driver : nullptr;
  const std::string why_driver = driver.status().message();
  const auto daemon_side = device::make_cuda_daemon_backend();
  const auto client_side = device::make_cuda_driver_backend();
  const std::string why_daemon = daemon_side.status().message();
  if (api != nullptr) {
    // A driver is loaded: the backends exist exactly when it sees a GPU.
    int n = 0;
    api->cuDeviceGetCount(&n);
    CHECK(daemon_side.ok() == (n > 0));
    CHECK(client_side.ok() == (n > 0));
    return;
  }
  CHECK(!daemon_side.ok());
  CHECK(!client_side.ok());
  CHECK(why_daemon == why_driver);
  CHECK(why_daemon.find("CUDA driver") != std::string::npos);
}

TEST_CASE("STOKER_DEVICE_BACKEND chooses the backend on both sides, and an unknown name is refused") {
  ::setenv("STOKER_DEVICE_BACKEND", "hostsim", 1);
  auto sim = device::make_importer_backend();
  REQUIRE(sim.ok());
  CHECK((*sim)->kind() == device::BackendKind::kHostSim);
  ::setenv("STOKER_DEVICE_BACKEND", "none", 1);
  const auto none = device::make_importer_backend();
  CHECK(!none.ok());
  CHECK(none.status().message() == "STOKER_DEVICE_BACKEND=none");
  ::setenv("STOKER_DEVICE_BACKEND", "cdua", 1);
  const auto typo = device::make_exporter_backend();
  CHECK(!typo.ok());
  CHECK(typo.status().message().find("'cdua' is not one of cuda, hostsim, none") != std::string::npos);
  ::unsetenv("STOKER_DEVICE_BACKEND");
}

#ifdef STOKER_HAVE_NORMALIZE_FATBIN
TEST_CASE("the normalize kernel is embedded as a CUDA fatbin that names both entry points") {
  REQUIRE(stoker_normalize_fatbin_size > 64);
  std::uint32_t magic = 0;
  std::memcpy(&magic, stoker_normalize_fatbin, 4);
  CHECK(magic == 0xBA55ED50u);  // the fatbin container's magic
  CHECK(reinterpret_cast<std::uintptr_t>(stoker_normalize_fatbin) % 8 == 0);
  const std::string_view bytes(reinterpret_cast<const char*>(stoker_normalize_fatbin), stoker_normalize_fatbin_size);
  CHECK(bytes.find("stoker_normalize_table") != std::string_view::npos);
  CHECK(bytes.find("stoker_normalize_table_f32") != std::string_view::npos);  // the float32 one
}
#endif
