// Unit tier: the whole-image decoders of issue #16 (WebP, TIFF, BMP, PPM/PGM) on small real
// files (tests/data/formats), their refusals, and sniffing by content.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "image/other_decoders.hpp"
#include "image/sample_processor.hpp"

using namespace stoker::image;

namespace {

std::vector<std::uint8_t> read(const std::string& name) {
  std::ifstream in(std::string(STOKER_TEST_DATA_DIR) + "/formats/" + name, std::ios::binary);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Decoded {
  bool ok;
  SampleResult r;
  std::vector<std::uint8_t> rgb;
  std::uint32_t w = 0, h = 0;
  int orientation = 1;
};

Decoded decode(const std::vector<std::uint8_t>& d, std::uint64_t max_pixels = 1u << 30) {
  Decoded o;
  OtherFormat f;
  REQUIRE(sniff_other(d, f));
  o.ok = decode_other(f, d, max_pixels, o.rgb, o.w, o.h, o.orientation, o.r);
  return o;
}

double mean_abs_diff(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  REQUIRE(a.size() == b.size());
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += std::abs(int(a[i]) - int(b[i]));
  return s / static_cast<double>(a.size());
}

}  // namespace

TEST_CASE("every lossless format decodes to the same pixels as the PPM of the same image", "[image][formats]") {
  const Decoded ref = decode(read("rgb.ppm"));
  REQUIRE(ref.ok);
  CHECK((ref.w == 48 && ref.h == 32));
  for (const char* f : {"lossless.webp", "alpha.webp", "lzw.tif", "rgb24.bmp", "rgba32.bmp"}) {
    INFO(f);
    const Decoded d = decode(read(f));
    REQUIRE(d.ok);
    CHECK((d.w == 48 && d.h == 32));
    CHECK(d.rgb == ref.rgb);  // alpha dropped, not composited: as PIL's convert("RGB")
  }
  // Palettes quantize; lossy WebP approximates.
  for (const char* f : {"pal8.bmp", "palette.tif", "lossy.webp"}) {
    INFO(f);
    const Decoded d = decode(read(f));
    REQUIRE(d.ok);
    CHECK(mean_abs_diff(d.rgb, ref.rgb) < 12.0);
  }
}

TEST_CASE("16-bit PGM samples are scaled to 8 bits (PIL would clip them to white)", "[image][formats]") {
  const Decoded g8 = decode(read("gray.pgm")), g16 = decode(read("gray16.pgm"));
  REQUIRE((g8.ok && g16.ok));
  CHECK(g16.rgb == g8.rgb);  // v * 257 / 65535 * 255 == v
  CHECK((g8.rgb[0] == g8.rgb[1] && g8.rgb[1] == g8.rgb[2]));  // gray expanded to RGB
}

TEST_CASE("truncated, corrupt and oversized files are refused with the right kind, before allocating",
          "[image][formats]") {
  for (const char* f : {"lossless.webp", "lzw.tif", "rgb24.bmp", "rgb.ppm", "gray16.pgm"}) {
    INFO(f);
    auto d = read(f);
    d.resize(d.size() / 2);
    const Decoded t = decode(d);
    CHECK_FALSE(t.ok);
    CHECK((t.r.error == SampleErrorKind::kTruncated || t.r.error == SampleErrorKind::kCorrupt));
    CHECK_FALSE(t.r.reason.empty());
    const Decoded big = decode(read(f), 1000);  // 48 x 32 = 1536 pixels
    CHECK_FALSE(big.ok);
    CHECK(big.r.error == SampleErrorKind::kTooLarge);
    CHECK_THAT(big.r.reason, Catch::Contains("48x32") && Catch::Contains("max_pixels 1000"));
  }
  // A BMP header that claims 2^31 x 2^31 pixels is refused from the header alone.
  auto bmp = read("rgb24.bmp");
  for (int i : {18, 22}) bmp[i] = 0, bmp[i + 1] = 0, bmp[i + 2] = 0, bmp[i + 3] = 0x7f;
  const Decoded huge = decode(bmp, 178956970);
  CHECK(huge.r.error == SampleErrorKind::kTooLarge);
  // Garbage after a valid-looking magic.
  const std::vector<std::uint8_t> junk = {'P', '6', ' ', 'x', 'y', 'z'};
  CHECK(decode(junk).r.error == SampleErrorKind::kCorrupt);
}

TEST_CASE("the format is chosen by content: a WebP named .jpg goes through the whole pipeline",
          "[image][formats]") {
  PipelineSpec spec;
  spec.geometry = Geometry::kResize;
  spec.out_height = spec.out_width = 16;
  SampleProcessor p(spec);
  std::vector<std::uint8_t> out(spec.sample_bytes());
  for (const char* f : {"lossy.webp", "lzw.tif", "pal8.bmp", "gray.pgm"}) {
    INFO(f);
    const SampleResult r = p.process(read(f), 1, 0, 0, out.data());
    CHECK(r.ok());
  }
}
