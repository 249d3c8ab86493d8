// Unit tier: the whole-image decoders of issue #16 (WebP, TIFF, BMP, PPM/PGM) on small real
// files (tests/data/formats), their refusals, and sniffing by content.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "image/exif.hpp"
#include "image/other_decoders.hpp"
#include "image/sample_processor.hpp"

using namespace stoker::image;

namespace {

std::vector<std::uint8_t> read_format_file(const std::string& name) {
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

double format_mean_abs_diff(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  REQUIRE(a.size() == b.size());
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += std::abs(int(a[i]) - int(b[i]));
  return s / static_cast<double>(a.size());
}

}  // namespace

TEST_CASE("every lossless format decodes to the same pixels as the PPM of the same image", "[image][formats]") {
  const Decoded ref = decode(read_format_file("rgb.ppm"));
  REQUIRE(ref.ok);
  CHECK((ref.w == 48 && ref.h == 32));
  for (const char* f : {"lossless.webp", "alpha.webp", "lzw.tif", "rgb24.bmp", "rgba32.bmp"}) {
    INFO(f);
    const Decoded d = decode(read_format_file(f));
    REQUIRE(d.ok);
    CHECK((d.w == 48 && d.h == 32));
    CHECK(d.rgb == ref.rgb);  // alpha dropped, not composited: as PIL's convert("RGB")
  }
  // Palettes quantize; lossy WebP approximates.
  for (const char* f : {"pal8.bmp", "palette.tif", "lossy.webp"}) {
    INFO(f);
    const Decoded d = decode(read_format_file(f));
    REQUIRE(d.ok);
    CHECK(format_mean_abs_diff(d.rgb, ref.rgb) < 12.0);
  }
}

TEST_CASE("16-bit PGM samples are scaled to 8 bits (PIL would clip them to white)", "[image][formats]") {
  const Decoded g8 = decode(read_format_file("gray.pgm")), g16 = decode(read_format_file("gray16.pgm"));
  REQUIRE((g8.ok && g16.ok));
  CHECK(g16.rgb == g8.rgb);  // v * 257 / 65535 * 255 == v
  CHECK((g8.rgb[0] == g8.rgb[1] && g8.rgb[1] == g8.rgb[2]));  // gray expanded to RGB
}

TEST_CASE("truncated, corrupt and oversized files are refused with the right kind, before allocating",
          "[image][formats]") {
  for (const char* f : {"lossless.webp", "lzw.tif", "rgb24.bmp", "rgb.ppm", "gray16.pgm"}) {
    INFO(f);
    auto d = read_format_file(f);
    d.resize(d.size() / 2);
    const Decoded t = decode(d);
    CHECK_FALSE(t.ok);
    CHECK((t.r.error == SampleErrorKind::kTruncated || t.r.error == SampleErrorKind::kCorrupt));
    CHECK_FALSE(t.r.reason.empty());
    const Decoded big = decode(read_format_file(f), 1000);  // 48 x 32 = 1536 pixels
    CHECK_FALSE(big.ok);
    CHECK(big.r.error == SampleErrorKind::kTooLarge);
    CHECK_THAT(big.r.reason, Catch::Contains("48x32") && Catch::Contains("max_pixels 1000"));
  }
  // A BMP header that claims 2^31 x 2^31 pixels is refused from the header alone.
  auto bmp = read_format_file("rgb24.bmp");
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
    const SampleResult r = p.process(read_format_file(f), 1, 0, 0, out.data());
    CHECK(r.ok());
  }
}

namespace {

std::vector<std::uint8_t> run_spec(const PipelineSpec& spec, const std::vector<std::uint8_t>& file, std::uint64_t id,
                                   SampleResult* result = nullptr) {
  SampleProcessor p(spec);
  std::vector<std::uint8_t> out(spec.sample_bytes());
  const SampleResult r = p.process(file, 5, 0, id, out.data());
  if (result) *result = r;
  REQUIRE(r.ok());
  return out;
}

std::vector<std::uint8_t> rgb_of_pnm(const std::string& header, const std::vector<std::uint8_t>& samples) {
  std::vector<std::uint8_t> d(header.begin(), header.end());
  d.insert(d.end(), samples.begin(), samples.end());
  Decoded o = decode(d);
  REQUIRE(o.ok);
  return o.rgb;
}

}  // namespace

TEST_CASE("WebP region-and-scale decoding gives the pixels of a whole decode and the same crop",
          "[image][formats][webp]") {
  // A 640x427 lossy and a 320x213 lossless WebP of a real photo. With 48 and 96 px outputs
  // most random crops are reduced (by 2..6) by libwebp's rescaler before the resample;
  // Resize + CenterCrop (shorter side out * 256 / 224, as 256 / 224) decodes a window with its
  // filter margin.
  for (const char* f : {"photo_lossy.webp", "photo_lossless.webp"}) {
    const auto file = read_format_file(f);
    for (const std::uint32_t size : {48u, 96u}) {
      for (const Geometry g : {Geometry::kRandomResizedCrop, Geometry::kResizeCenterCrop}) {
        PipelineSpec region;
        region.geometry = g;
        region.out_width = region.out_height = size;
        region.resize_shorter = size * 256 / 224;
        region.flip_probability = 0.5;
        PipelineSpec whole = region;
        whole.webp_region_decode = false;
        double worst = 0, sum = 0;
        const int n = g == Geometry::kRandomResizedCrop ? 24 : 1;
        for (int id = 0; id < n; ++id) {
          SampleResult r;
          const auto a = run_spec(region, file, id, &r);
          CHECK(r.format == ImageFormat::kWebp);
          const double d = format_mean_abs_diff(a, run_spec(whole, file, id));
          worst = std::max(worst, d);
          sum += d;
        }
        INFO(f << " out " << size << " geometry " << static_cast<int>(g) << " worst " << worst << " mean " << sum / n);
        CHECK(worst < 1.5);    // within the fidelity limit (2.0 of 255) with room to spare
        CHECK(sum / n < 1.0);
        if (std::string(f).find("lossless") != std::string::npos && size == 96) CHECK(worst == 0);  // crop only
      }
    }
  }
}

TEST_CASE("a WebP window decoded at full resolution is exactly that part of the whole image",
          "[image][formats][webp]") {
  for (const char* f : {"photo_lossy.webp", "photo_lossless.webp"}) {
    INFO(f);
    const auto file = read_format_file(f);
    std::vector<std::uint8_t> full, part;
    std::uint32_t w = 0, h = 0;
    int orientation = 0;
    SampleResult r;
    REQUIRE(decode_webp(file, 1u << 30, full, w, h, orientation, r));
    CHECK(orientation == 1);
    const WebpWindow win{38, 20, 38 + 101, 20 + 77};
    REQUIRE(decode_webp_window(file, win, part, r));
    REQUIRE(part.size() == 101u * 77 * 3);
    double diff = 0;
    int exact = 0;
    for (int y = 0; y < 77; ++y) {
      for (int x = 0; x < 101 * 3; ++x) {
        const int a = part[(y * 101) * 3 + x], b = full[((y + 20) * w + 38) * 3 + x];
        diff += std::abs(a - b);
        exact += a == b;
      }
    }
    // Lossless: identical. Lossy: libwebp's fancy chroma upsampling may differ at the window's
    // top and bottom rows only.
    CHECK(diff / (101.0 * 77 * 3) < 0.05);
    if (std::string(f).find("lossless") != std::string::npos) CHECK(exact == 101 * 77 * 3);
    // Reduced 1/4 by libwebp: an area average, close to a box average of the whole decode.
    const WebpWindow quarter{0, 0, 320, 212, 80, 53};
    REQUIRE(decode_webp_window(file, quarter, part, r));
    REQUIRE(part.size() == 80u * 53 * 3);
    double box_diff = 0;
    for (int y = 0; y < 52; ++y) {
      for (int x = 0; x < 80; ++x) {
        for (int c = 0; c < 3; ++c) {
          int s = 0;
          for (int dy = 0; dy < 4; ++dy)
            for (int dx = 0; dx < 4; ++dx) s += full[((4 * y + dy) * w + 4 * x + dx) * 3 + c];
          box_diff += std::abs(part[(y * 80 + x) * 3 + c] - s / 16.0);
        }
      }
    }
    CHECK(box_diff / (80.0 * 52 * 3) < (std::string(f).find("lossless") != std::string::npos ? 0.5 : 1.5));
  }
}

TEST_CASE("WebP EXIF orientation and the TIFF Orientation tag are applied like a JPEG's",
          "[image][formats][orientation]") {
  // orientation/orientN.*: the stored pixels of the corpus photo Landscape_N.jpg (which shows
  // the same upright picture for every N) saved by PIL with orientation N, as a WebP EXIF
  // chunk and as the TIFF tag.
  for (const char* ext : {".webp", ".tif"}) {
    PipelineSpec spec;
    spec.geometry = Geometry::kResizeCenterCrop;
    spec.resize_shorter = 40;
    spec.out_width = 40;
    spec.out_height = 32;
    const auto ref = run_spec(spec, read_format_file(std::string("orientation/orient1") + ext), 0);
    for (int o = 1; o <= 8; ++o) {
      INFO(ext << " orientation " << o);
      const auto file = read_format_file("orientation/orient" + std::to_string(o) + ext);
      CHECK(format_mean_abs_diff(run_spec(spec, file, 0), ref) < 4.0);
      std::vector<std::uint8_t> rgb;
      std::uint32_t w = 0, h = 0;
      int stored = 0;
      OtherFormat f;
      SampleResult r;
      REQUIRE(sniff_other(file, f));
      REQUIRE(decode_other(f, file, 1u << 30, rgb, w, h, stored, r));
      CHECK(stored == o);
      CHECK(w == (o >= 5 ? 48u : 72u));  // stored size: 5..8 are stored on their side
    }
    // Turned off, the stored pixels are used as they are (what PIL hands torchvision).
    spec.apply_exif_orientation = false;
    const auto raw = run_spec(spec, read_format_file(std::string("orientation/orient3") + ext), 0);
    CHECK(format_mean_abs_diff(raw, ref) > 20.0);
  }
}

TEST_CASE("TIFF with unassociated alpha keeps its colour values, as PIL's convert(\"RGB\") does",
          "[image][formats]") {
  // rgba_unassoc.tif: rgb.ppm plus a gradient alpha, written by PIL (ExtraSamples = 2).
  // libtiff's RGBA reader would multiply the colours by alpha; PIL drops alpha.
  const Decoded ref = decode(read_format_file("rgb.ppm"));
  const Decoded t = decode(read_format_file("rgba_unassoc.tif"));
  REQUIRE((ref.ok && t.ok));
  CHECK(t.rgb == ref.rgb);
}

TEST_CASE("PPM/PGM with maxval below 255 are scaled as PIL scales them", "[image][formats]") {
  // Expected values from Pillow 9.4 (PpmDecoder: min(255, round(v / maxval * 255)), half to
  // even): v = 1 and 5 of 6 are 42.5 and 212.5, rounded to 42 and 212; above maxval is white.
  const auto g6 = rgb_of_pnm("P5\n8 1\n6\n", {0, 1, 2, 3, 4, 5, 6, 7});
  const std::vector<std::uint8_t> want6 = {0, 42, 85, 128, 170, 212, 255, 255};
  for (int i = 0; i < 8; ++i) {
    INFO(i);
    CHECK(int(g6[3 * i]) == want6[i]);
    CHECK((g6[3 * i] == g6[3 * i + 1] && g6[3 * i] == g6[3 * i + 2]));
  }
  const auto c100 = rgb_of_pnm("P6\n4 1\n# c\n100\n", {0, 1, 2, 33, 49, 50, 51, 99, 100, 101, 255, 17});
  CHECK(c100 == std::vector<std::uint8_t>{0, 3, 5, 84, 125, 128, 130, 252, 255, 255, 255, 43});
  const auto g1 = rgb_of_pnm("P5\n3 1\n1\n", {0, 1, 2});
  CHECK(g1 == std::vector<std::uint8_t>{0, 0, 0, 255, 255, 255, 255, 255, 255});
}

TEST_CASE("a refused file of any format leaves the processor usable: the next file decodes as on a fresh one",
          "[image][formats]") {
  PipelineSpec spec;
  spec.geometry = Geometry::kRandomResizedCrop;
  spec.out_width = spec.out_height = 24;
  SampleProcessor reused(spec);
  std::vector<std::uint8_t> out(spec.sample_bytes());
  for (const char* f : {"photo_lossy.webp", "lossless.webp", "lzw.tif", "rgba_unassoc.tif", "rgb24.bmp", "rgb.ppm",
                        "gray16.pgm"}) {
    INFO(f);
    const auto good = read_format_file(f);
    auto bad = good;
    bad.resize(good.size() / 2);
    const SampleResult refused = reused.process(bad, 5, 0, 1, out.data());
    CHECK_FALSE(refused.ok());
    CHECK(refused.format != ImageFormat::kUnknown);  // still known by its first bytes
    REQUIRE(reused.process(good, 5, 0, 1, out.data()).ok());
    CHECK(out == run_spec(spec, good, 1));
  }
}

TEST_CASE("EXIF orientation from a bare TIFF header (WebP EXIF chunk), with or without the Exif prefix",
          "[image][formats][orientation]") {
  // Big-endian TIFF header, IFD at 8 with one entry: Orientation (0x0112), SHORT, 1, value 6.
  const std::vector<std::uint8_t> mm = {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0, 0};
  CHECK(exif_orientation_tiff(mm.data(), mm.size()) == 6);
  std::vector<std::uint8_t> prefixed = {'E', 'x', 'i', 'f', 0, 0};
  prefixed.insert(prefixed.end(), mm.begin(), mm.end());
  CHECK(exif_orientation_tiff(prefixed.data(), prefixed.size()) == 6);
  CHECK(exif_orientation(prefixed.data(), prefixed.size()) == 6);  // the JPEG APP1 form
  // Anything cut short or out of range is "no orientation", never a read past the end.
  for (std::size_t n = 0; n < mm.size(); ++n) CHECK(exif_orientation_tiff(mm.data(), n) == 1);
  auto bad = mm;
  bad[19] = 9;
  CHECK(exif_orientation_tiff(bad.data(), bad.size()) == 1);
}
