// Unit tier: pixels of the deterministic pipelines against PIL/torchvision references stored
// in tests/data/reference (regenerate with make_reference.py there), for each interpolation
// (bilinear, bicubic, nearest). A deterministic pipeline decodes at full scale (no DCT
// reduction, decode.dct_scale: auto), so every value is within kMaxPixelDiff of PIL's:
// bilinear rounds its 14-bit weights (PIL: 22) and runs the vertical pass first; bicubic runs
// PIL's order and precision and nearest PIL's indices (both equal to PIL where EXIF does not
// swap the axes).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "image/sample_processor.hpp"

using namespace stoker::image;

namespace {

constexpr double kLimit = 2.0;  // mean absolute difference (0-255 scale)
// Per pixel and channel: what the bilinear path meets; bicubic and nearest must meet it too.
constexpr int kMaxPixelDiff = 1;

std::vector<std::uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A .npy (version 1.x) of uint8 with C order and the given shape; returns its data bytes.
std::vector<std::uint8_t> read_npy_u8(const std::string& path, int h, int w) {
  const auto bytes = read_file(path);
  REQUIRE(bytes.size() > 10);
  REQUIRE(std::string(bytes.begin() + 1, bytes.begin() + 6) == "NUMPY");
  REQUIRE(bytes[6] == 1);
  const std::size_t header_len = bytes[8] | (bytes[9] << 8);
  REQUIRE(bytes.size() >= 10 + header_len);
  const std::string header(bytes.begin() + 10, bytes.begin() + 10 + static_cast<long>(header_len));
  REQUIRE_THAT(header, Catch::Contains("'|u1'") && Catch::Contains("'fortran_order': False"));
  char shape[64];
  std::snprintf(shape, sizeof shape, "(%d, %d, 3)", h, w);
  REQUIRE_THAT(header, Catch::Contains(shape));
  std::vector<std::uint8_t> data(bytes.begin() + 10 + static_cast<long>(header_len), bytes.end());
  REQUIRE(data.size() == static_cast<std::size_t>(h) * w * 3);
  return data;
}

}  // namespace

TEST_CASE("val and resize pipelines match PIL/torchvision per pixel, with each interpolation", "[image]") {
  const std::string dir = std::string(STOKER_TEST_DATA_DIR) + "/reference/";
  std::ifstream manifest(dir + "manifest.txt");
  REQUIRE(manifest.good());
  int cases = 0;
  for (std::string line; std::getline(manifest, line);) {
    if (line.empty()) continue;
    std::istringstream fields(line);
    std::string npy, source, geometry;
    int resize = 0, out_h = 0, out_w = 0, exif = 0;
    std::string filter;
    REQUIRE(fields >> npy >> source >> geometry >> resize >> out_h >> out_w >> exif >> filter);
    PipelineSpec spec;
    REQUIRE((filter == "bilinear" || filter == "bicubic" || filter == "nearest"));
    spec.filter = filter == "bicubic"   ? ResizeFilter::kBicubic
                  : filter == "nearest" ? ResizeFilter::kNearest
                                        : ResizeFilter::kBilinear;
    spec.geometry = geometry == "val" ? Geometry::kResizeCenterCrop : Geometry::kResize;
    spec.resize_shorter = static_cast<std::uint32_t>(resize);
    spec.out_height = static_cast<std::uint32_t>(out_h);
    spec.out_width = static_cast<std::uint32_t>(out_w);
    spec.apply_exif_orientation = exif != 0;
    spec.layout = stoker::proto::Layout::kNHWC;  // as the reference arrays

    const auto want = read_npy_u8(dir + npy, out_h, out_w);
    const auto encoded = read_file(std::string(STOKER_TEST_DATA_DIR) + "/" + source);
    SampleProcessor p(spec);
    std::vector<std::uint8_t> got(spec.sample_bytes());
    const SampleResult r = p.process(encoded, 0, 0, 0, got.data());
    INFO(npy << " from " << source << ": " << r.reason);
    REQUIRE(r.ok());

    double sum = 0;
    int worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const int d = std::abs(int(got[i]) - int(want[i]));
      sum += d;
      worst = std::max(worst, d);
    }
    const double mad = sum / static_cast<double>(got.size());
    std::printf("reference %-24s mean_abs_diff %.3f max %d\n", npy.c_str(), mad, worst);
    CHECK(mad <= kLimit);
    CHECK(worst <= kMaxPixelDiff);
    ++cases;
  }
  CHECK(cases >= 14);
}
