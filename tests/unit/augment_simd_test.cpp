// Unit tier: the vectorised augment paths give the bytes of their scalar twins (issue #36).
// Each case runs the op twice on the same input, once as chosen for this CPU and once with
// force_scalar_for_tests(true), or against a plain reference written here, on odd widths
// (tails shorter than a vector), images near the border and values at 0 and 255. On a CPU
// without AVX2 both runs take the scalar path and the cases pass trivially; the direct
// bilinear_row_avx2 case returns early there.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "augment/color_ops.hpp"
#include "augment/erasing.hpp"
#include "augment/geometric.hpp"
#include "augment/gray.hpp"
#include "augment/simd_level.hpp"
#include "augment/warp_avx2.hpp"
#include "core/half.hpp"
#include "core/rng.hpp"

using namespace stoker;

namespace {

// Random bytes with runs of 0 and 255, so clamps and the round-half cases are reached.
std::vector<std::uint8_t> noisy_image(int w, int h, std::uint64_t seed) {
  CounterRng rng(seed, 0, 0, 0);
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w) * h * 3);
  for (std::size_t i = 0; i < rgb.size(); ++i) {
    const std::uint64_t r = rng.below(10);
    rgb[i] = r == 0 ? 0 : r == 1 ? 255 : static_cast<std::uint8_t>(rng.below(256));
  }
  return rgb;
}

// Runs `op` on a copy of `image` with the SIMD paths allowed and on another with them
// forbidden; returns both results.
template <class Op>
std::pair<std::vector<std::uint8_t>, std::vector<std::uint8_t>> both_paths(const std::vector<std::uint8_t>& image, Op op) {
  std::vector<std::uint8_t> wide = image, scalar = image;
  op(wide.data());
  augment::force_scalar_for_tests(true);
  op(scalar.data());
  augment::force_scalar_for_tests(false);
  return {wide, scalar};
}

}  // namespace

TEST_CASE("warp bilinear: the AVX2 rows equal the scalar path, odd widths, with and without fill", "[augment][simd]") {
  const std::array<float, 3> fill{12.5f, 200.0f, 255.0f};
  std::vector<std::uint8_t> scratch;
  for (const auto& size : {std::pair{9, 7}, std::pair{17, 5}, std::pair{31, 33}, std::pair{67, 45}, std::pair{8, 8}}) {
    const int w = size.first, h = size.second;  // locals, not a structured binding: lambdas capture them (clang 14)
    const auto image = noisy_image(w, h, static_cast<std::uint64_t>(w * 100 + h));
    for (const double angle : {0.0, 3.7, -45.0, 90.0, 135.0}) {
      for (const bool with_fill : {false, true}) {
        augment::AffineParams a;
        a.angle = angle;
        a.translate = {1.0, -2.0};
        a.scale = 0.9;
        a.shear = {7.5, -2.0};
        auto [wide, scalar] = both_paths(image, [&](std::uint8_t* p) {
          augment::affine(p, w, h, a, augment::Interpolation::kBilinear, with_fill ? &fill : nullptr, scratch);
        });
        INFO(w << "x" << h << " angle " << angle << " fill " << with_fill);
        REQUIRE(wide == scalar);
      }
    }
  }
}

TEST_CASE("bilinear_row_avx2: blocks with a neighbour outside, NaN or huge coordinates are left alone",
          "[augment][simd]") {
  if (!augment::use_avx2()) {
    WARN("no AVX2 on this CPU: bilinear_row_avx2 is never chosen, nothing to check");
    return;
  }
  const int w = 16, h = 4;
  auto image = noisy_image(w, h, 7);
  image.push_back(0);  // the one byte of padding the kernel may read
  // Block 0 wholly inside (x in [0, w - 1), y in [0, h - 1)); block 1 one pixel each way out.
  std::vector<float> ix(16), iy(16);
  for (int j = 0; j < 8; ++j) ix[j] = 0.25f + 1.75f * static_cast<float>(j), iy[j] = 1.5f;
  for (int j = 8; j < 16; ++j) ix[j] = 2.0f, iy[j] = 1.0f;
  const float bad[] = {-0.5f, 15.0f /* x + 1 == w */, std::numeric_limits<float>::quiet_NaN(), 3e9f};
  std::vector<std::uint8_t> done(2), out(16 * 3, 0xAB);
  for (const float b : bad) {
    ix[12] = b;
    std::fill(out.begin(), out.end(), 0xAB);
    augment::bilinear_row_avx2(image.data(), w, h, ix.data(), iy.data(), 16, nullptr, out.data(), done.data());
    INFO("bad x " << b);
    CHECK(done[0] == 1);
    CHECK(done[1] == 0);
    CHECK(std::all_of(out.begin() + 24, out.end(), [](std::uint8_t v) { return v == 0xAB; }));
  }
  // y on the last row: its south neighbours are outside.
  ix[12] = 2.0f;
  iy[9] = static_cast<float>(h - 1);
  augment::bilinear_row_avx2(image.data(), w, h, ix.data(), iy.data(), 16, nullptr, out.data(), done.data());
  CHECK(done[1] == 0);
  // The done block's bytes are the scalar formula's.
  for (int j = 0; j < 8; ++j) {
    const float x0 = std::floor(ix[j]), y0 = std::floor(iy[j]);
    const float fe = ix[j] - x0, fs = iy[j] - y0, fw = 1.0f - fe, fn = 1.0f - fs;
    const std::uint8_t* p = image.data() + (static_cast<std::size_t>(y0) * w + static_cast<std::size_t>(x0)) * 3;
    for (int c = 0; c < 3; ++c) {
      float v = static_cast<float>(p[c]) * (fn * fw);
      v = v + static_cast<float>(p[3 + c]) * (fn * fe);
      v = v + static_cast<float>(p[w * 3 + c]) * (fs * fw);
      v = v + static_cast<float>(p[w * 3 + 3 + c]) * (fs * fe);
      const float rounded = std::nearbyint(v);
      CHECK(out[3 * j + c] == static_cast<std::uint8_t>(std::clamp(rounded, 0.0f, 255.0f)));
    }
  }
}

// The sharpness of issue #17: the degenerate image as a whole copy, nine passes of taps.
std::vector<std::uint8_t> sharpness_reference(std::vector<std::uint8_t> rgb, int w, int h, double factor) {
  if (w <= 2 || h <= 2) return rgb;
  const std::size_t row = static_cast<std::size_t>(w) * 3;
  std::vector<std::uint8_t> degenerate = rgb;
  const float k_side = 1.0f / 13.0f, k_mid = 5.0f / 13.0f;
  for (int y = 1; y < h - 1; ++y) {
    for (std::size_t i = 3; i < row - 3; ++i) {
      float a = 0.0f;
      for (int dy = -1; dy <= 1; ++dy) {
        for (int dx = -1; dx <= 1; ++dx) {
          a += static_cast<float>(rgb[row * (y + dy) + i + 3 * dx]) * (dy == 0 && dx == 0 ? k_mid : k_side);
        }
      }
      degenerate[row * y + i] = static_cast<std::uint8_t>(std::clamp(std::nearbyint(a), 0.0f, 255.0f));
    }
  }
  const float r = static_cast<float>(factor), s = static_cast<float>(1.0 - factor);
  for (std::size_t i = 0; i < rgb.size(); ++i) {
    const float x = r * static_cast<float>(rgb[i]);
    const float y = s * static_cast<float>(degenerate[i]);
    rgb[i] = static_cast<std::uint8_t>(static_cast<std::int32_t>(std::clamp(x + y, 0.0f, 255.0f)));
  }
  return rgb;
}

TEST_CASE("sharpness: the fused row pass equals the two-pass reference on both paths", "[augment][simd]") {
  for (const auto& size : {std::pair{3, 3}, std::pair{4, 9}, std::pair{13, 5}, std::pair{37, 11}, std::pair{2, 8}}) {
    const int w = size.first, h = size.second;
    const auto image = noisy_image(w, h, static_cast<std::uint64_t>(w * 31 + h));
    for (const double factor : {0.0, 0.01, 0.5, 1.0, 1.37, 1.99, -0.5}) {
      const auto expected = sharpness_reference(image, w, h, factor);
      auto [wide, scalar] = both_paths(image, [&](std::uint8_t* p) { augment::adjust_sharpness(p, w, h, factor); });
      INFO(w << "x" << h << " factor " << factor);
      REQUIRE(wide == expected);
      REQUIRE(scalar == expected);
    }
  }
}

TEST_CASE("solarize: the vectorised select equals the per-value test at every threshold", "[augment][simd]") {
  std::vector<std::uint8_t> all(256 * 3 + 5);  // every value, an odd length
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint8_t>(i * 7);
  for (const int t : {-5, 0, 1, 127, 128, 255, 256, 300}) {
    std::vector<std::uint8_t> got = all, expected = all;
    augment::solarize(got.data(), (all.size() - 2) / 3, t);  // the 2 values past the last pixel stay
    for (std::size_t i = 0; i + 2 < expected.size(); ++i) {
      if (expected[i] >= t) expected[i] = static_cast<std::uint8_t>(255 - expected[i]);
    }
    INFO("threshold " << t);
    REQUIRE(got == expected);
  }
}

TEST_CASE("random_erasing on float output: row fills equal the element-by-element definition", "[augment][simd]") {
  const int w = 13, h = 9;
  const std::size_t n = static_cast<std::size_t>(w) * h * 3;
  augment::EraseBox box;
  box.top = 2, box.left = 3, box.height = 5, box.width = 7;
  for (const bool planar : {true, false}) {
    for (const bool random : {false, true}) {
      for (const auto kind : {augment::FloatKind::kFloat32, augment::FloatKind::kFloat16}) {
        augment::ErasingParams e;
        e.value = {-1.5f, 0.25f, 3.0f};
        e.random = random;
        std::vector<float> got32(n, 9.0f), want32(n, 9.0f);
        std::vector<std::uint16_t> got16(n, 7), want16(n, 7);
        CounterRng rng_got(3, 1, 4, kStreamErasing), rng_want(3, 1, 4, kStreamErasing);
        augment::erase_float(kind == augment::FloatKind::kFloat32 ? static_cast<void*>(got32.data()) : got16.data(),
                             kind, planar, w, h, box, e, rng_got);
        // torchvision's order: channel, row, column; one standard normal per value.
        for (int c = 0; c < 3; ++c) {
          for (int y = box.top; y < box.top + box.height; ++y) {
            for (int x = box.left; x < box.left + box.width; ++x) {
              float v = e.value[c];
              if (random) {
                const double u1 = 1.0 - rng_want.uniform(), u2 = rng_want.uniform();
                v = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
              }
              const std::size_t px = static_cast<std::size_t>(y) * w + x;
              const std::size_t at = planar ? c * static_cast<std::size_t>(w) * h + px : px * 3 + c;
              want32[at] = v;
              want16[at] = float_to_half(v);
            }
          }
        }
        INFO("planar " << planar << " random " << random);
        if (kind == augment::FloatKind::kFloat32) {
          REQUIRE(got32 == want32);
        } else {
          REQUIRE(got16 == want16);
        }
      }
    }
  }
}

TEST_CASE("gray values: the AVX2 deinterleave equals gray_of at every length up to two blocks and more",
          "[augment][simd]") {
  const auto image = noisy_image(67, 1, 11);
  for (std::size_t n = 0; n <= 67; ++n) {
    std::vector<std::uint8_t> got(n + 1, 0xCD);
    augment::gray_values(image.data(), n, got.data());
    for (std::size_t i = 0; i < n; ++i) {
      INFO("length " << n << " pixel " << i);
      REQUIRE(got[i] == augment::gray_of(image.data() + 3 * i));
    }
    REQUIRE(got[n] == 0xCD);  // nothing written past the last pixel
  }
  // White, whose weights' sum (0.9999) keeps it at 254, and black.
  std::vector<std::uint8_t> flat(3 * 16, 255), gray(16);
  augment::gray_values(flat.data(), 16, gray.data());
  CHECK(gray[0] == augment::gray_of(flat.data()));
  CHECK(gray[15] == gray[0]);
}

TEST_CASE("contrast, saturation and grayscale: the same bytes on both paths, odd sizes", "[augment][simd]") {
  for (const std::size_t pixels : {std::size_t{1}, std::size_t{7}, std::size_t{255}, std::size_t{257}, std::size_t{1001}}) {
    const auto image = noisy_image(static_cast<int>(pixels), 1, pixels);
    for (const double factor : {0.0, 0.6, 1.3, 1.99}) {
      auto [c_wide, c_scalar] = both_paths(image, [&](std::uint8_t* p) { augment::adjust_contrast(p, pixels, factor); });
      auto [s_wide, s_scalar] = both_paths(image, [&](std::uint8_t* p) { augment::adjust_saturation(p, pixels, factor); });
      INFO(pixels << " pixels, factor " << factor);
      REQUIRE(c_wide == c_scalar);
      REQUIRE(s_wide == s_scalar);
    }
    auto [g_wide, g_scalar] = both_paths(image, [&](std::uint8_t* p) { augment::to_grayscale(p, pixels); });
    REQUIRE(g_wide == g_scalar);
  }
}

// Issue #17's autocontrast and equalize, channel by channel: the references the one-pass
// versions must equal.
std::vector<std::uint8_t> autocontrast_reference(std::vector<std::uint8_t> rgb) {
  const std::size_t pixels = rgb.size() / 3;
  for (int c = 0; c < 3; ++c) {
    std::uint8_t lo = 255, hi = 0;
    for (std::size_t i = 0; i < pixels; ++i) lo = std::min(lo, rgb[3 * i + c]), hi = std::max(hi, rgb[3 * i + c]);
    const float reciprocal = 1.0f / (static_cast<float>(hi) - static_cast<float>(lo));
    float minimum = lo, scale = reciprocal * 255.0f;
    if (!std::isfinite(scale)) minimum = 0, scale = 1;
    for (std::size_t i = 0; i < pixels; ++i) {
      const float v = (static_cast<float>(rgb[3 * i + c]) - minimum) * scale;
      rgb[3 * i + c] = static_cast<std::uint8_t>(static_cast<std::int32_t>(std::clamp(v, 0.0f, 255.0f)));
    }
  }
  return rgb;
}

std::vector<std::uint8_t> equalize_reference(std::vector<std::uint8_t> rgb) {
  const std::size_t pixels = rgb.size() / 3;
  for (int c = 0; c < 3; ++c) {
    std::int64_t hist[256] = {};
    for (std::size_t i = 0; i < pixels; ++i) ++hist[rgb[3 * i + c]];
    int last = 255;
    while (last > 0 && hist[last] == 0) --last;
    std::int64_t sum = 0;
    for (int v = 0; v < last; ++v) sum += hist[v];
    const std::int64_t step = sum / 255;
    if (step == 0) continue;
    std::uint8_t lut[256];
    std::int64_t cum = 0;
    lut[0] = 0;
    for (int v = 0; v < 255; ++v) {
      cum += hist[v];
      lut[v + 1] = static_cast<std::uint8_t>(std::min<std::int64_t>(255, (cum + step / 2) / step));
    }
    for (std::size_t i = 0; i < pixels; ++i) rgb[3 * i + c] = lut[rgb[3 * i + c]];
  }
  return rgb;
}

TEST_CASE("autocontrast and equalize: the one-pass versions equal the per-channel definitions", "[augment][simd]") {
  for (const std::size_t pixels : {std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{17}, std::size_t{1000},
                                   std::size_t{4099}}) {
    auto image = noisy_image(static_cast<int>(pixels), 1, pixels + 5);
    // A narrow green channel (its extremes in the tail, after the last whole block) and a flat blue one.
    for (std::size_t i = 0; i < pixels; ++i) image[3 * i + 1] = static_cast<std::uint8_t>(100 + i % 7), image[3 * i + 2] = 42;
    image[3 * (pixels - 1) + 1] = 3;
    INFO(pixels << " pixels");
    auto got = image;
    augment::autocontrast(got.data(), pixels);
    REQUIRE(got == autocontrast_reference(image));
    got = image;
    augment::equalize(got.data(), pixels);
    REQUIRE(got == equalize_reference(image));
  }
}
