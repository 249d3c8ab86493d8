// Unit tier: every PNG pixel format the engine accepts (gray, gray+alpha, RGB, RGBA, 8 and 16
// bits, palettes of 1..8 bits with and without transparency) comes out as RGB with alpha
// dropped, as PIL's convert("RGB") does. The PNGs are written here with libpng's simplified
// API: one flat colour each, so the expected output is that colour everywhere.
#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <sys/resource.h>

#include <cstdint>
#include <vector>

#include <png.h>

#include "image/png_decoder.hpp"
#include "image/sample_processor.hpp"

using namespace stoker::image;

namespace {

constexpr int kW = 40, kH = 30;

std::vector<std::uint8_t> write_png(png_uint_32 format, const void* pixels, const void* colormap = nullptr,
                                    png_uint_32 colormap_entries = 0) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = kW;
  image.height = kH;
  image.format = format;
  image.colormap_entries = colormap_entries;
  png_alloc_size_t size = 0;
  REQUIRE(png_image_write_get_memory_size(image, size, 0, pixels, 0, colormap));
  std::vector<std::uint8_t> out(size);
  REQUIRE(png_image_write_to_memory(&image, out.data(), &size, 0, pixels, 0, colormap));
  out.resize(size);
  return out;
}

// Decodes through the val pipeline (NHWC uint8) and checks every pixel is `rgb`.
void expect_flat(const std::vector<std::uint8_t>& png, std::uint8_t r, std::uint8_t g, std::uint8_t b) {
  PipelineSpec spec;
  spec.resize_shorter = 24;
  spec.out_height = spec.out_width = 20;
  spec.layout = stoker::proto::Layout::kNHWC;
  SampleProcessor p(spec);
  std::vector<std::uint8_t> out(spec.sample_bytes());
  const SampleResult res = p.process(png, 1, 0, 0, out.data());
  INFO(res.reason);
  REQUIRE(res.ok());
  for (std::size_t i = 0; i < out.size(); i += 3) {
    REQUIRE(out[i] == r);
    REQUIRE(out[i + 1] == g);
    REQUIRE(out[i + 2] == b);
  }
}

template <class T>
std::vector<T> flat(std::initializer_list<T> px) {
  std::vector<T> v;
  for (int i = 0; i < kW * kH; ++i) v.insert(v.end(), px);
  return v;
}

}  // namespace

TEST_CASE("PNG 8-bit gray, gray+alpha, RGB, RGBA decode to RGB with alpha dropped", "[image]") {
  expect_flat(write_png(PNG_FORMAT_GRAY, flat<std::uint8_t>({90}).data()), 90, 90, 90);
  expect_flat(write_png(PNG_FORMAT_GA, flat<std::uint8_t>({90, 128}).data()), 90, 90, 90);
  expect_flat(write_png(PNG_FORMAT_RGB, flat<std::uint8_t>({10, 200, 30}).data()), 10, 200, 30);
  expect_flat(write_png(PNG_FORMAT_RGBA, flat<std::uint8_t>({10, 200, 30, 50}).data()), 10, 200, 30);
}

TEST_CASE("PNG 16-bit samples keep their high byte", "[image]") {
  // Linear formats are written as 16-bit; opaque alpha, since the simplified API takes
  // linear colour as premultiplied.
  expect_flat(write_png(PNG_FORMAT_LINEAR_Y, flat<std::uint16_t>({0x5a77}).data()), 0x5a, 0x5a, 0x5a);
  expect_flat(write_png(PNG_FORMAT_LINEAR_Y_ALPHA, flat<std::uint16_t>({0x5a77, 0xffff}).data()), 0x5a, 0x5a,
              0x5a);
  expect_flat(write_png(PNG_FORMAT_LINEAR_RGB_ALPHA,
                        flat<std::uint16_t>({0x1200, 0xc8ff, 0x2001, 0xffff}).data()),
              0x12, 0xc8, 0x20);
}

TEST_CASE("PNG palettes of every bit depth, with and without transparency", "[image]") {
  // libpng picks the palette's bit depth from the number of entries: 2 -> 1 bit, 4 -> 2,
  // 16 -> 4, 256 -> 8.
  for (png_uint_32 entries : {2u, 4u, 16u, 256u}) {
    INFO(entries << " palette entries");
    std::vector<std::uint8_t> rgb(entries * 3), rgba(entries * 4);
    for (png_uint_32 i = 0; i < entries; ++i) {
      rgb[i * 3] = rgba[i * 4] = static_cast<std::uint8_t>(i);
      rgb[i * 3 + 1] = rgba[i * 4 + 1] = 150;
      rgb[i * 3 + 2] = rgba[i * 4 + 2] = static_cast<std::uint8_t>(255 - i);
      rgba[i * 4 + 3] = static_cast<std::uint8_t>(i * 7);  // a tRNS chunk
    }
    const auto index = flat<std::uint8_t>({static_cast<std::uint8_t>(entries - 1)});
    const auto last = static_cast<std::uint8_t>(entries - 1);
    expect_flat(write_png(PNG_FORMAT_RGB_COLORMAP, index.data(), rgb.data(), entries), last, 150,
                static_cast<std::uint8_t>(255 - last));
    expect_flat(write_png(PNG_FORMAT_RGBA_COLORMAP, index.data(), rgba.data(), entries), last, 150,
                static_cast<std::uint8_t>(255 - last));
  }
}

TEST_CASE("truncated and corrupt PNGs fail cleanly", "[image]") {
  const auto png = write_png(PNG_FORMAT_RGB, flat<std::uint8_t>({10, 200, 30}).data());
  PipelineSpec spec;
  spec.resize_shorter = 24;
  spec.out_height = spec.out_width = 20;
  SampleProcessor p(spec);
  std::vector<std::uint8_t> out(spec.sample_bytes());
  for (std::size_t keep : {std::size_t{8}, std::size_t{20}, std::size_t{40}, png.size() / 2, png.size() - 13}) {
    INFO("kept " << keep << " of " << png.size());
    const std::vector<std::uint8_t> cut(png.begin(), png.begin() + static_cast<long>(keep));
    const SampleResult r = p.process(cut, 1, 0, 0, out.data());
    CHECK_FALSE(r.ok());
    CHECK_FALSE(r.reason.empty());
  }
  auto bad = png;
  for (std::size_t i = 40; i < bad.size() - 20; i += 5) bad[i] ^= 0xa5;
  CHECK_FALSE(p.process(bad, 1, 0, 0, out.data()).ok());
}

TEST_CASE("a PNG chunk claiming 1.6 GB is refused without allocating it (fuzzer regression)", "[image]") {
  std::ifstream in(std::string(STOKER_TEST_DATA_DIR) + "/fuzz-regressions/png-huge-text-chunk-oom", std::ios::binary);
  REQUIRE(in.good());
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes.erase(bytes.begin());  // the harness's selector byte
  rusage before{};
  ::getrusage(RUSAGE_SELF, &before);
  stoker::image::PipelineSpec spec;
  spec.out_height = spec.out_width = 24;
  stoker::image::SampleProcessor p(spec);
  std::vector<std::uint8_t> out(spec.sample_bytes());
  const auto r = p.process(bytes, 1, 0, 0, out.data());
  CHECK_FALSE(r.ok());
  rusage after{};
  ::getrusage(RUSAGE_SELF, &after);
  CHECK(after.ru_maxrss - before.ru_maxrss < 200 * 1024);  // KiB: far below the 1.6 GB claimed
}

// ---------------------------------------------------------------------------------------------
// Refusals (issue #15 section 2, #13): bounded before allocating, and the processor is usable after.

namespace {

std::vector<std::uint8_t> write_gray_png(png_uint_32 w, png_uint_32 h, std::uint8_t value) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = w;
  image.height = h;
  image.format = PNG_FORMAT_GRAY;
  const std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h, value);
  png_alloc_size_t size = 0;
  REQUIRE(png_image_write_get_memory_size(image, size, 0, px.data(), 0, nullptr));
  std::vector<std::uint8_t> out(size);
  REQUIRE(png_image_write_to_memory(&image, out.data(), &size, 0, px.data(), 0, nullptr));
  out.resize(size);
  return out;
}

}  // namespace

TEST_CASE("decode_png refuses an image above max_pixels before allocating its pixels or row pointers",
          "[image]") {
  const auto png = write_png(PNG_FORMAT_RGB, flat<std::uint8_t>({10, 200, 30}).data());
  std::vector<std::uint8_t> rgb;
  std::uint32_t w = 0, h = 0;
  SampleResult r;
  CHECK_FALSE(decode_png(png, 1000, rgb, w, h, r));  // 40 x 30 = 1200 pixels
  CHECK(r.error == SampleErrorKind::kTooLarge);
  CHECK_THAT(r.reason, Catch::Contains("40x30") && Catch::Contains("max_pixels 1000"));
  CHECK(rgb.capacity() == 0);
  SampleResult fine;
  CHECK(decode_png(png, 1200, rgb, w, h, fine));
  CHECK(rgb.size() == 40u * 30 * 3);
}

TEST_CASE("refused, then good, on one processor: every PNG refusal leaves it usable", "[image]") {
  PipelineSpec spec;
  spec.resize_shorter = 24;
  spec.out_height = spec.out_width = 20;
  spec.layout = stoker::proto::Layout::kNHWC;
  spec.max_pixels = 100000;
  SampleProcessor p(spec);
  std::vector<std::uint8_t> out(spec.sample_bytes());
  const auto good = write_png(PNG_FORMAT_RGB, flat<std::uint8_t>({10, 200, 30}).data());
  // 1 x 1,000,000: 1M pixels in a few KB; its row pointers alone would be 8 MB (the
  // decode_png test above checks nothing is allocated for a refused size).
  const auto tall = write_gray_png(1, 1000000, 77);
  const std::vector<std::uint8_t> header_only(good.begin(), good.begin() + 40);
  const std::vector<std::uint8_t> half(good.begin(), good.begin() + static_cast<long>(good.size() / 2));
  auto scribbled = good;
  for (std::size_t i = 45; i < scribbled.size() - 20; i += 3) scribbled[i] ^= 0x5a;
  struct Refusal {
    const char* what;
    const std::vector<std::uint8_t>* file;
    SampleErrorKind kind;
  };
  for (const Refusal& f : {Refusal{"1 x 1,000,000 above max_pixels", &tall, SampleErrorKind::kTooLarge},
                           Refusal{"header only", &header_only, SampleErrorKind::kTruncated},
                           Refusal{"cut in the pixel data", &half, SampleErrorKind::kTruncated},
                           Refusal{"scribbled pixel data", &scribbled, SampleErrorKind::kCorrupt}}) {
    INFO(f.what);
    const SampleResult refused = p.process(*f.file, 1, 0, 0, out.data());
    CHECK(refused.error == f.kind);
    CHECK_FALSE(refused.reason.empty());
    std::fill(out.begin(), out.end(), 0);
    const SampleResult ok = p.process(good, 1, 0, 1, out.data());
    CHECK(ok.ok());
    CHECK((out[0] == 10 && out[1] == 200 && out[2] == 30));
  }
}
