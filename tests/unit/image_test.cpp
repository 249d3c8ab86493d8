// Unit tier: the decode + augment engine on real images (tests/data/corpus) and on broken
// files made from them here.
#include <catch2/catch.hpp>

#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "image/output_writer.hpp"
#include "image/sample_processor.hpp"

using namespace stoker::image;
using stoker::proto::DType;
using stoker::proto::Layout;

namespace {

std::vector<std::uint8_t> read(const std::string& rel) {
  std::ifstream in(std::string(STOKER_TEST_DATA_DIR) + "/" + rel, std::ios::binary);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

PipelineSpec val_spec(std::uint32_t resize, std::uint32_t crop, Layout layout = Layout::kNHWC) {
  PipelineSpec s;
  s.geometry = Geometry::kResizeCenterCrop;
  s.resize_shorter = resize;
  s.out_height = s.out_width = crop;
  s.layout = layout;
  return s;
}

PipelineSpec train_spec(std::uint32_t size, double flip) {
  PipelineSpec s;
  s.geometry = Geometry::kRandomResizedCrop;
  s.out_height = s.out_width = size;
  s.flip_probability = flip;
  return s;
}

struct Out {
  SampleResult result;
  std::vector<std::uint8_t> bytes;
};

Out run(const PipelineSpec& spec, const std::vector<std::uint8_t>& data, std::uint64_t id = 0,
        std::uint64_t epoch = 0) {
  SampleProcessor p(spec);
  Out o;
  o.bytes.assign(spec.sample_bytes(), 0);
  o.result = p.process(data, 42, epoch, id, o.bytes.data());
  return o;
}

double mean_abs_diff(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  REQUIRE(a.size() == b.size());
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += std::abs(int(a[i]) - int(b[i]));
  return s / static_cast<double>(a.size());
}

// Encodes a synthetic JPEG for shape edge cases (not for speed or fidelity measurements).
std::vector<std::uint8_t> encode_jpeg(int w, int h, int components, J_COLOR_SPACE cs,
                                      const std::vector<std::uint8_t>& pixels, int restart_rows = 0) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = static_cast<JDIMENSION>(w);
  c.image_height = static_cast<JDIMENSION>(h);
  c.input_components = components;
  c.in_color_space = cs;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 95, TRUE);
  c.restart_in_rows = restart_rows;
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<std::uint8_t*>(pixels.data()) + static_cast<std::size_t>(c.next_scanline) * w * components;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::vector<std::uint8_t> out(buf, buf + size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

}  // namespace

TEST_CASE("every EXIF orientation decodes upright", "[image]") {
  for (const char* kind : {"Landscape", "Portrait"}) {
    const auto spec = val_spec(96, 80);
    const Out ref = run(spec, read(std::string("corpus/exif-orientation/") + kind + "_1.jpg"));
    REQUIRE(ref.result.ok());
    for (int o = 0; o <= 8; ++o) {
      const Out got = run(spec, read(std::string("corpus/exif-orientation/") + kind + "_" +
                                     std::to_string(o) + ".jpg"));
      INFO(kind << " orientation " << o);
      REQUIRE(got.result.ok());
      CHECK(mean_abs_diff(got.bytes, ref.bytes) < 4.0);
    }
  }
}

TEST_CASE("orientation can be turned off", "[image]") {
  auto spec = val_spec(96, 80);
  const Out upright = run(spec, read("corpus/exif-orientation/Landscape_6.jpg"));
  spec.apply_exif_orientation = false;
  const Out raw = run(spec, read("corpus/exif-orientation/Landscape_6.jpg"));
  REQUIRE(raw.result.ok());
  CHECK(mean_abs_diff(upright.bytes, raw.bytes) > 20.0);
}

TEST_CASE("baseline, progressive and arithmetic JPEGs of one picture decode alike", "[image]") {
  const auto spec = val_spec(120, 112);
  const Out base = run(spec, read("corpus/jpeg-turbo-testimages/testorig.jpg"));
  REQUIRE(base.result.ok());
  for (const char* f : {"testimgint.jpg", "testimgari.jpg"}) {
    const Out o = run(spec, read(std::string("corpus/jpeg-turbo-testimages/") + f));
    INFO(f);
    REQUIRE(o.result.ok());
    CHECK(mean_abs_diff(o.bytes, base.bytes) < 3.0);
  }
}

TEST_CASE("PNG: 8-bit gray and 16-bit RGB decode - a PNG named .jpg is decoded by content", "[image]") {
  const auto spec = val_spec(120, 112);
  const Out gray = run(spec, read("corpus/jpeg-turbo-testimages/testorig.png"));
  REQUIRE(gray.result.ok());
  for (std::size_t i = 0; i < gray.bytes.size(); i += 3) {
    REQUIRE(gray.bytes[i] == gray.bytes[i + 1]);
    REQUIRE(gray.bytes[i] == gray.bytes[i + 2]);
  }
  const Out rgb16 = run(spec, read("corpus/jpeg-turbo-testimages/monkey16.png"));
  REQUIRE(rgb16.result.ok());
  double sum = 0;
  for (auto v : rgb16.bytes) sum += v;
  CHECK(sum / rgb16.bytes.size() > 10.0);  // real content, not zeros
}

TEST_CASE("unsupported formats are refused with a reason", "[image]") {
  const auto spec = val_spec(64, 56);
  Out o = run(spec, read("corpus/jpeg-turbo-testimages/monkey12.jpg"));
  CHECK(o.result.error == SampleErrorKind::kUnsupported);
  CHECK_THAT(o.result.reason, Catch::Contains("12-bit"));
  // An 8-bit palette BMP of libjpeg-turbo's test images decodes (issue #16); GIF does not.
  o = run(spec, read("corpus/jpeg-turbo-testimages/shira_bird8.bmp"));
  CHECK(o.result.ok());
  const std::string gif = "GIF89a\x01\x00\x01\x00";
  o = run(spec, std::vector<std::uint8_t>(gif.begin(), gif.end()));
  CHECK(o.result.error == SampleErrorKind::kUnsupported);
  CHECK_THAT(o.result.reason, Catch::Contains("GIF"));
  const std::string ascii_pnm = "P3\n1 1\n255\n0 0 0\n";
  o = run(spec, std::vector<std::uint8_t>(ascii_pnm.begin(), ascii_pnm.end()));
  CHECK_THAT(o.result.reason, Catch::Contains("P3 is not supported"));
  o = run(spec, {});
  CHECK(o.result.error == SampleErrorKind::kUnsupported);
  CHECK_THAT(o.result.reason, Catch::Contains("empty"));
  const std::string text = "hello, I am not a picture\n";
  o = run(spec, std::vector<std::uint8_t>(text.begin(), text.end()));
  CHECK(o.result.error == SampleErrorKind::kUnsupported);
  CHECK_THAT(o.result.reason, Catch::Contains("text"));
}

TEST_CASE("truncated and corrupt JPEGs fail cleanly or are delivered with warnings", "[image]") {
  const auto full = read("demo/landscape/landscape_03.jpg");
  for (double keep : {0.3, 0.6, 0.9, 0.99}) {
    std::vector<std::uint8_t> cut(full.begin(), full.begin() + static_cast<long>(full.size() * keep));
    for (const auto& spec : {val_spec(64, 56), train_spec(32, 0.5)}) {
      const Out o = run(spec, cut, 3);
      INFO("kept " << keep);
      CHECK(o.result.error == SampleErrorKind::kTruncated);
      CHECK_THAT(o.result.reason, Catch::Contains("Premature end"));
    }
  }
  // Header cut short.
  std::vector<std::uint8_t> head(full.begin(), full.begin() + 40);
  CHECK_FALSE(run(val_spec(64, 56), head).result.ok());

  // Flipped bytes inside the scan: never a crash; delivered with warnings or refused. A file
  // delivered with warnings by default is refused in strict mode.
  auto strict = val_spec(64, 56);
  strict.strict = true;
  std::uint32_t delivered = 0, refused = 0, warned = 0, strict_refused = 0;
  for (int trial = 0; trial < 40; ++trial) {
    auto bad = full;
    for (int k = 0; k < 8; ++k) bad[bad.size() / 3 + trial * 131 + k * 7] ^= 0x5a;
    const Out o = run(val_spec(64, 56), bad);
    (o.result.ok() ? delivered : refused)++;
    if (o.result.ok() && o.result.warnings > 0) {
      ++warned;
      const Out s = run(strict, bad);
      strict_refused += s.result.ok() ? 0 : 1;
    }
  }
  CHECK(delivered + refused == 40);
  CHECK(warned + refused > 0);
  CHECK(strict_refused == warned);
}

TEST_CASE("a header claiming a huge image is refused before any allocation", "[image]") {
  const auto orig = read("corpus/jpeg-turbo-testimages/testorig.jpg");
  auto claim = [&](int w, int h) {
    auto data = orig;
    for (std::size_t i = 2; i + 9 < data.size(); ++i) {
      if (data[i] == 0xff && (data[i + 1] == 0xc0 || data[i + 1] == 0xc2)) {  // SOF0 / SOF2
        data[i + 5] = static_cast<std::uint8_t>(h >> 8);
        data[i + 6] = static_cast<std::uint8_t>(h & 0xff);
        data[i + 7] = static_cast<std::uint8_t>(w >> 8);
        data[i + 8] = static_cast<std::uint8_t>(w & 0xff);
        return data;
      }
    }
    FAIL("no SOF marker");
    return data;
  };
  Out o = run(val_spec(64, 56), claim(60000, 60000));  // 3.6e9 pixels > max_pixels
  CHECK(o.result.error == SampleErrorKind::kTooLarge);
  CHECK_THAT(o.result.reason, Catch::Contains("60000x60000") && Catch::Contains("max_pixels"));
  o = run(val_spec(64, 56), claim(65535, 65535));     // beyond what libjpeg accepts
  CHECK(o.result.error == SampleErrorKind::kTooLarge);
  auto small = val_spec(64, 56);
  small.max_pixels = 10000;                           // the limit is a setting
  o = run(small, orig);
  CHECK(o.result.error == SampleErrorKind::kTooLarge);
}

TEST_CASE("odd sizes: 1x1 and 1x10000", "[image]") {
  for (auto [w, h] : {std::pair{1, 1}, std::pair{1, 10000}, std::pair{10000, 1}}) {
    std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h * 3);
    for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<std::uint8_t>(i * 7);
    const auto jpg = encode_jpeg(w, h, 3, JCS_RGB, px);
    for (const auto& spec : {val_spec(32, 32), train_spec(24, 0.5)}) {
      INFO(w << "x" << h);
      CHECK(run(spec, jpg).result.ok());
    }
  }
}

TEST_CASE("grayscale and CMYK JPEGs come out as RGB", "[image]") {
  std::vector<std::uint8_t> gray(64 * 48, 77);
  Out o = run(val_spec(40, 32), encode_jpeg(64, 48, 1, JCS_GRAYSCALE, gray));
  REQUIRE(o.result.ok());
  CHECK(std::abs(int(o.bytes[0]) - 77) <= 2);
  CHECK(o.bytes[0] == o.bytes[1]);

  // libjpeg writes CMYK with an Adobe marker, which readers (PIL too) take as inverted CMYK:
  // R = C*K/255 on the stored values.
  std::vector<std::uint8_t> cmyk(64 * 48 * 4);
  for (std::size_t i = 0; i < cmyk.size(); i += 4) {
    cmyk[i] = 200; cmyk[i + 1] = 100; cmyk[i + 2] = 50; cmyk[i + 3] = 128;
  }
  o = run(val_spec(40, 32), encode_jpeg(64, 48, 4, JCS_CMYK, cmyk));
  REQUIRE(o.result.ok());
  CHECK(std::abs(int(o.bytes[0]) - 200 * 128 / 255) <= 3);
  CHECK(std::abs(int(o.bytes[1]) - 100 * 128 / 255) <= 3);
  CHECK(std::abs(int(o.bytes[2]) - 50 * 128 / 255) <= 3);
}

TEST_CASE("augmentation is a function of (seed, epoch, sample id) only", "[image]") {
  const auto data = read("demo/flower/flower_01.jpg");
  const auto spec = train_spec(64, 0.5);
  const Out a = run(spec, data, 5, 0), b = run(spec, data, 5, 0);
  CHECK(a.bytes == b.bytes);
  CHECK(run(spec, data, 6, 0).bytes != a.bytes);
  CHECK(run(spec, data, 5, 1).bytes != a.bytes);
}

TEST_CASE("flip, layout and dtype are folded into one write", "[image]") {
  const auto data = read("demo/insect/insect_02.jpg");
  auto spec = train_spec(48, 0.0);
  spec.layout = Layout::kNHWC;
  const Out plain = run(spec, data, 9);
  spec.flip_probability = 1.0;
  const Out flipped = run(spec, data, 9);
  const int S = 48;
  for (int y = 0; y < S; ++y) {
    for (int x = 0; x < S; ++x) {
      for (int c = 0; c < 3; ++c) {
        REQUIRE(flipped.bytes[(y * S + x) * 3 + c] == plain.bytes[(y * S + (S - 1 - x)) * 3 + c]);
      }
    }
  }
  spec.flip_probability = 0.0;
  spec.layout = Layout::kNCHW;
  const Out chw = run(spec, data, 9);
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < S * S; ++i) REQUIRE(chw.bytes[c * S * S + i] == plain.bytes[i * 3 + c]);
  }
  spec.dtype = DType::kFloat32;
  spec.normalize = true;
  spec.mean = {0.485f, 0.456f, 0.406f};
  spec.stddev = {0.229f, 0.224f, 0.225f};
  const Out f = run(spec, data, 9);
  const float* fp = reinterpret_cast<const float*>(f.bytes.data());
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < S * S; ++i) {
      const float want = (chw.bytes[c * S * S + i] / 255.f - spec.mean[c]) / spec.stddev[c];
      REQUIRE(std::fabs(fp[c * S * S + i] - want) < 1e-5f);
    }
  }
  spec.dtype = DType::kFloat16;
  const Out h = run(spec, data, 9);
  const auto* hp = reinterpret_cast<const std::uint16_t*>(h.bytes.data());
  for (int i = 0; i < 3 * S * S; ++i) REQUIRE(hp[i] == float_to_half(fp[i]));
}

TEST_CASE("float16 conversion rounds to nearest even", "[image]") {
  CHECK(float_to_half(0.0f) == 0x0000);
  CHECK(float_to_half(1.0f) == 0x3c00);
  CHECK(float_to_half(-2.0f) == 0xc000);
  CHECK(float_to_half(65504.0f) == 0x7bff);
  CHECK(float_to_half(1e6f) == 0x7c00);
  CHECK(float_to_half(5.9604645e-8f) == 0x0001);  // smallest subnormal
  CHECK(float_to_half(1.0f + 1.0f / 2048) == 0x3c00);  // tie -> even
  CHECK(float_to_half(1.0f + 3.0f / 2048) == 0x3c02);
}

TEST_CASE("restart markers decode like the same image without them", "[image]") {
  std::vector<std::uint8_t> px(320 * 240 * 3);
  for (int y = 0; y < 240; ++y) {
    for (int x = 0; x < 320; ++x) {
      for (int c = 0; c < 3; ++c) px[(y * 320 + x) * 3 + c] = static_cast<std::uint8_t>((x * (c + 1) + y * 3) & 0xff);
    }
  }
  const auto plain = encode_jpeg(320, 240, 3, JCS_RGB, px);
  const auto with_rst = encode_jpeg(320, 240, 3, JCS_RGB, px, 1);
  bool has_rst = false;
  for (std::size_t i = 0; i + 1 < with_rst.size(); ++i) has_rst = has_rst || (with_rst[i] == 0xff && with_rst[i + 1] == 0xd0);
  REQUIRE(has_rst);
  for (const auto& spec : {val_spec(120, 112), train_spec(64, 0.5)}) {
    const Out a = run(spec, plain, 4), b = run(spec, with_rst, 4);
    REQUIRE(a.result.ok());
    REQUIRE(b.result.ok());
    CHECK(a.bytes == b.bytes);
  }
}

TEST_CASE("a PNG header claiming 100000x100000 pixels is refused before any allocation", "[image]") {
  auto png = read("corpus/jpeg-turbo-testimages/testorig.png");
  REQUIRE(png.size() > 24);
  const std::uint32_t big = 100000;
  for (int k = 0; k < 4; ++k) {
    png[16 + k] = static_cast<std::uint8_t>(big >> (24 - 8 * k));
    png[20 + k] = static_cast<std::uint8_t>(big >> (24 - 8 * k));
  }
  const Out o = run(val_spec(64, 56), png);
  CHECK(o.result.error == SampleErrorKind::kTooLarge);
  CHECK_THAT(o.result.reason, Catch::Contains("100000x100000"));
}

// ---------------------------------------------------------------------------------------------
// A refusal leaves the decoder usable (issue #15 §2): one processor, as one worker has.

TEST_CASE("refused, then good, on one processor: every refusal leaves the decoder reusable", "[image]") {
  PipelineSpec spec = val_spec(40, 32);
  spec.max_pixels = 100000;
  SampleProcessor p(spec);
  std::vector<std::uint8_t> out(spec.sample_bytes());
  std::vector<std::uint8_t> big_px(500 * 375 * 3, 90), small_px(200 * 200 * 3, 160);
  const auto big = encode_jpeg(500, 375, 3, JCS_RGB, big_px);       // 187,500 pixels: too large
  const auto small = encode_jpeg(200, 200, 3, JCS_RGB, small_px);   // 40,000: fine
  const auto twelve_bit = read("corpus/jpeg-turbo-testimages/monkey12.jpg");
  const std::vector<std::uint8_t> header_only(small.begin(), small.begin() + 120);
  struct Refusal {
    const char* what;
    const std::vector<std::uint8_t>* file;
    SampleErrorKind kind;
  };
  for (const Refusal& r : {Refusal{"too large", &big, SampleErrorKind::kTooLarge},
                           Refusal{"12-bit", &twelve_bit, SampleErrorKind::kUnsupported},
                           Refusal{"truncated header", &header_only, SampleErrorKind::kTruncated}}) {
    INFO(r.what);
    const SampleResult refused = p.process(*r.file, 1, 0, 0, out.data());
    CHECK(refused.error == r.kind);
    const SampleResult good = p.process(small, 1, 0, 1, out.data());
    CHECK(good.ok());
    CHECK(good.reason.empty());
    CHECK(out[0] == 160);  // the good file's pixels, not a leftover
  }
}

TEST_CASE("decode.max_memory_mb refuses a progressive JPEG that needs more, cleanly, and the next decodes",
          "[image]") {
  // A progressive JPEG keeps every DCT coefficient of the image while decoding:
  // 2400 x 2400 x 3 components x 2 bytes = ~33 MB, above a 16 MB budget.
  const int w = 2400, h = 2400;
  std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h * 3);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<std::uint8_t>((i * 2654435761u) >> 24);
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = w;
  c.image_height = h;
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = px.data() + static_cast<std::size_t>(c.next_scanline) * w * 3;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  const std::vector<std::uint8_t> progressive(buf, buf + size);
  jpeg_destroy_compress(&c);
  std::free(buf);

  PipelineSpec spec = val_spec(40, 32);
  spec.max_memory_bytes = std::uint64_t{16} << 20;
  SampleProcessor p(spec);
  std::vector<std::uint8_t> out(spec.sample_bytes());
  const SampleResult refused = p.process(progressive, 1, 0, 0, out.data());
  CHECK(refused.error == SampleErrorKind::kTooLarge);
  CHECK_THAT(refused.reason, Catch::Contains("decode.max_memory_mb") && Catch::Contains("16 MB"));
  std::vector<std::uint8_t> small_px(64 * 48 * 3, 200);
  CHECK(p.process(encode_jpeg(64, 48, 3, JCS_RGB, small_px), 1, 0, 1, out.data()).ok());
  // With the default budget (256 MB) the same file decodes.
  CHECK(run(val_spec(40, 32), progressive).result.ok());
}
