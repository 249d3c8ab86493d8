// unit tier: device delivery without a device. Built twice: against the libraries of this
// build (CUDA or stub), and against the stub sources alone (STOKER_TEST_STUB), so the stub is
// compiled and checked even in CUDA builds. Runs everywhere; never needs a GPU.
#include <catch2/catch.hpp>

#include "cuda/device_exporter.hpp"
#include "cuda/device_importer.hpp"

using namespace stoker;

TEST_CASE("device delivery: create() explains itself when it returns nothing", "[unit][cuda]") {
  std::string why_exporter, why_importer;
  auto exporter = cuda::DeviceExporter::create(why_exporter);
  auto importer = cuda::DeviceImporter::create(0, why_importer);
#ifdef STOKER_TEST_STUB
  CHECK_FALSE(cuda::DeviceExporter::built_with_cuda());
  CHECK_FALSE(cuda::DeviceImporter::built_with_cuda());
  REQUIRE(exporter == nullptr);
  REQUIRE(importer == nullptr);
#endif
  if (!cuda::DeviceExporter::built_with_cuda()) {
    REQUIRE(exporter == nullptr);
    CHECK_THAT(why_exporter, Catch::Contains("built without CUDA"));
  }
  if (!cuda::DeviceImporter::built_with_cuda()) {
    REQUIRE(importer == nullptr);
    CHECK_THAT(why_importer, Catch::Contains("built without CUDA"));
  }
  // A CUDA build on a machine without a GPU (or driver) says so instead of failing later.
  if (exporter == nullptr) {
    CHECK_FALSE(why_exporter.empty());
    UNSCOPED_INFO("exporter: " << why_exporter);
  }
  if (importer == nullptr) {
    CHECK_FALSE(why_importer.empty());
    UNSCOPED_INFO("importer: " << why_importer);
  }
  CHECK((exporter == nullptr) == (importer == nullptr));
  std::uint8_t uuid[16] = {};
  std::string why_uuid;
  if (importer == nullptr) {
    CHECK_FALSE(cuda::DeviceImporter::device_uuid(0, uuid, why_uuid));
    CHECK_FALSE(why_uuid.empty());
  }
}

TEST_CASE("a GPU UUID is spelled as nvidia-smi spells it", "[unit][cuda]") {
  const std::uint8_t u[16] = {0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0,
                              0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
  CHECK(cuda::gpu_uuid_string(u) == "GPU-12345678-9abc-def0-0123-456789abcdef");
}

TEST_CASE("device bytes of a batch: verbatim, or uint8 widened by the output dtype", "[unit][cuda]") {
  cuda::DeviceOutputSpec spec;
  CHECK(cuda::device_bytes_for(spec, 1000) == 1000);
  spec.normalize = true;
  spec.out_dtype = proto::DType::kFloat32;
  CHECK(cuda::device_bytes_for(spec, 1000) == 4000);
  spec.out_dtype = proto::DType::kFloat16;
  CHECK(cuda::device_bytes_for(spec, 1000) == 2000);
}

TEST_CASE("rings are keyed by job and rank", "[unit][cuda]") {
  CHECK(cuda::RingKey{0, 1} < cuda::RingKey{1, 0});
  CHECK(cuda::RingKey{1, 0} < cuda::RingKey{1, 2});
  CHECK(cuda::RingKey{3, 4} == cuda::RingKey{3, 4});
}
