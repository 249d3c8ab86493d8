#include "augment/color_ops.hpp"

#include <algorithm>
#include <cmath>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "augment/blur.hpp"
#include "augment/geometric.hpp"
#include "augment/gray.hpp"
#include "augment/hue.hpp"
#include "augment/pixel_math.hpp"

namespace stoker::augment {
namespace {

// torchvision's `.clamp(0, 255).to(torch.uint8)` of a float32: clamp, then truncate.
inline std::uint8_t to_u8(float v) {
  // Through int32 (exact for 0..255): float to int32 is what SSE2 converts in vectors.
  return static_cast<std::uint8_t>(static_cast<std::int32_t>(std::min(255.0f, std::max(0.0f, v))));
}

// Gray values are computed in blocks of this many pixels (a buffer on the stack).
constexpr std::size_t kGrayBlock = 256;

// _blend(img1, img2, ratio): ratio * img1 + (1 - ratio) * img2, both products in float32
// (the Python float ratio and 1.0 - ratio each rounded to float32 once). Each product is
// rounded before the sum, as torch does: this library is compiled with -ffp-contract=off, so
// no fused multiply-add merges them (daemon/image/CMakeLists.txt).
inline std::uint8_t blend(std::uint8_t a, float b, float r, float one_minus_r) {
  const float x = r * static_cast<float>(a);
  const float y = one_minus_r * b;
  return to_u8(x + y);
}

// A pointwise op whose result depends on the value alone: evaluated once per possible value.
void apply_lut(std::uint8_t* rgb, std::size_t values, const std::uint8_t (&lut)[256]) {
  for (std::size_t i = 0; i < values; ++i) rgb[i] = lut[rgb[i]];
}

}  // namespace

void adjust_brightness(std::uint8_t* rgb, std::size_t pixels, double factor) {
  const float r = static_cast<float>(factor), s = static_cast<float>(1.0 - factor);
  std::uint8_t lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = blend(static_cast<std::uint8_t>(v), 0.0f, r, s);
  apply_lut(rgb, pixels * 3, lut);
}

void adjust_contrast(std::uint8_t* rgb, std::size_t pixels, double factor) {
  // The blend target is the mean of the grayscale image (uint8 values, averaged as float).
  // An integer sum: exact, as the double sum of the same integers was (below 2^53).
  std::uint64_t sum = 0;
  std::uint8_t gray[kGrayBlock];
  for (std::size_t start = 0; start < pixels; start += kGrayBlock) {
    const std::size_t n = std::min(kGrayBlock, pixels - start);
    gray_values(rgb + 3 * start, n, gray);
    for (std::size_t k = 0; k < n; ++k) sum += gray[k];
  }
  const float mean = static_cast<float>(static_cast<double>(sum) / static_cast<double>(pixels));
  const float r = static_cast<float>(factor), s = static_cast<float>(1.0 - factor);
  std::uint8_t lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = blend(static_cast<std::uint8_t>(v), mean, r, s);
  apply_lut(rgb, pixels * 3, lut);
}

void adjust_saturation(std::uint8_t* rgb, std::size_t pixels, double factor) {
  const float r = static_cast<float>(factor), s = static_cast<float>(1.0 - factor);
  // In blocks: each pixel's gray repeated for its three values, then one blend loop along the
  // values, which vectorises (the same blend of the same value and gray as pixel by pixel).
  float gray3[3 * kGrayBlock];
  std::uint8_t gray[kGrayBlock];
  for (std::size_t start = 0; start < pixels; start += kGrayBlock) {
    const std::size_t n = std::min(kGrayBlock, pixels - start);
    std::uint8_t* p = rgb + 3 * start;
    gray_values(p, n, gray);
    for (std::size_t k = 0; k < n; ++k) gray3[3 * k] = gray3[3 * k + 1] = gray3[3 * k + 2] = gray[k];
    for (std::size_t i = 0; i < 3 * n; ++i) p[i] = blend(p[i], gray3[i], r, s);
  }
}

void to_grayscale(std::uint8_t* rgb, std::size_t pixels) {
  std::uint8_t gray[kGrayBlock];
  for (std::size_t start = 0; start < pixels; start += kGrayBlock) {
    const std::size_t n = std::min(kGrayBlock, pixels - start);
    std::uint8_t* p = rgb + 3 * start;
    gray_values(p, n, gray);  // the block's grays before any of its pixels is overwritten
    for (std::size_t k = 0; k < n; ++k) p[3 * k] = p[3 * k + 1] = p[3 * k + 2] = gray[k];
  }
}

void solarize(std::uint8_t* rgb, std::size_t pixels, int threshold) {
  if (threshold > 255) return;  // no value reaches it
  // A select rather than a conditional store, in uint8, so the loop vectorises (16 values an
  // SSE2 instruction): `v >= t` with t clamped to 0..255 is the same test as in int.
  const auto t = static_cast<std::uint8_t>(std::max(0, threshold));
  for (std::size_t i = 0; i < pixels * 3; ++i) {
    const std::uint8_t v = rgb[i];
    rgb[i] = v >= t ? static_cast<std::uint8_t>(255 - v) : v;
  }
}

void posterize(std::uint8_t* rgb, std::size_t pixels, int bits) {
  const auto mask = static_cast<std::uint8_t>(0xff << (8 - bits));
  for (std::size_t i = 0; i < pixels * 3; ++i) rgb[i] &= mask;
}

void autocontrast(std::uint8_t* rgb, std::size_t pixels) {
  std::uint8_t lo[3] = {255, 255, 255}, hi[3] = {0, 0, 0};
  std::size_t i = 0;
#if defined(__SSE2__)
  // 16 pixels (48 bytes, three registers) at a time: byte k of register j always holds channel
  // (16 j + k) % 3, so per-byte minima and maxima over the blocks reduce to the channels' at the end.
  if (pixels >= 16) {
    __m128i mn[3], mx[3];
    for (int j = 0; j < 3; ++j) mn[j] = _mm_set1_epi8(-1), mx[j] = _mm_setzero_si128();
    for (; i + 16 <= pixels; i += 16) {
      for (int j = 0; j < 3; ++j) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rgb + 3 * i + 16 * j));
        mn[j] = _mm_min_epu8(mn[j], v);
        mx[j] = _mm_max_epu8(mx[j], v);
      }
    }
    alignas(16) std::uint8_t bytes_min[48], bytes_max[48];
    for (int j = 0; j < 3; ++j) {
      _mm_store_si128(reinterpret_cast<__m128i*>(bytes_min + 16 * j), mn[j]);
      _mm_store_si128(reinterpret_cast<__m128i*>(bytes_max + 16 * j), mx[j]);
    }
    for (int k = 0; k < 48; ++k) {
      lo[k % 3] = std::min(lo[k % 3], bytes_min[k]);
      hi[k % 3] = std::max(hi[k % 3], bytes_max[k]);
    }
  }
#endif
  for (; i < pixels; ++i) {
    for (int c = 0; c < 3; ++c) {
      lo[c] = std::min(lo[c], rgb[3 * i + c]);
      hi[c] = std::max(hi[c], rgb[3 * i + c]);
    }
  }
  std::uint8_t lut[3][256];
  for (int c = 0; c < 3; ++c) {
    // torch evaluates `255 / (max - min)` as reciprocal(max - min) * 255, two roundings in
    // float32: done the same way here, or values at the top of the range differ by one.
    const float reciprocal = 1.0f / (static_cast<float>(hi[c]) - static_cast<float>(lo[c]));
    float minimum = lo[c], scale = reciprocal * 255.0f;
    if (!std::isfinite(scale)) minimum = 0, scale = 1;  // a flat channel stays as it is
    for (int v = 0; v < 256; ++v) lut[c][v] = to_u8((static_cast<float>(v) - minimum) * scale);
  }
  for (std::size_t i = 0; i < pixels; ++i) {
    std::uint8_t* p = rgb + 3 * i;
    p[0] = lut[0][p[0]], p[1] = lut[1][p[1]], p[2] = lut[2][p[2]];
  }
}

void equalize(std::uint8_t* rgb, std::size_t pixels) {
  // torchvision's _scale_channel: integer histogram arithmetic, exactly. The three histograms
  // in one pass over the pixels, and the three tables in one more.
  // Even and odd pixels count into separate tables, summed after: neighbouring pixels often
  // share a value, and two increments of one counter in a row wait on each other's store.
  // uint32: an image has far fewer than 2^32 pixels.
  std::uint32_t halves[2][3][256] = {};
  std::size_t i = 0;
  for (; i + 2 <= pixels; i += 2) {
    const std::uint8_t* p = rgb + 3 * i;
    ++halves[0][0][p[0]], ++halves[0][1][p[1]], ++halves[0][2][p[2]];
    ++halves[1][0][p[3]], ++halves[1][1][p[4]], ++halves[1][2][p[5]];
  }
  if (i < pixels) ++halves[0][0][rgb[3 * i]], ++halves[0][1][rgb[3 * i + 1]], ++halves[0][2][rgb[3 * i + 2]];
  std::uint32_t hist[3][256];
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) hist[c][v] = halves[0][c][v] + halves[1][c][v];
  }
  std::uint8_t lut[3][256];
  bool any = false;
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) lut[c][v] = static_cast<std::uint8_t>(v);  // step 0: unchanged
    // step = sum of the non-zero bins but the last non-zero one, // 255
    int last = 255;
    while (last > 0 && hist[c][last] == 0) --last;
    std::int64_t sum = 0;
    for (int v = 0; v < last; ++v) sum += hist[c][v];
    const std::int64_t step = sum / 255;
    if (step == 0) continue;
    any = true;
    std::int64_t cum = 0;
    lut[c][0] = 0;
    for (int v = 0; v < 255; ++v) {  // lut shifted by one: lut[v + 1] from the cumsum up to v
      cum += hist[c][v];
      lut[c][v + 1] = static_cast<std::uint8_t>(std::min<std::int64_t>(255, (cum + step / 2) / step));
    }
  }
  if (!any) return;
  for (std::size_t i = 0; i < pixels; ++i) {
    std::uint8_t* p = rgb + 3 * i;
    p[0] = lut[0][p[0]], p[1] = lut[1][p[1]], p[2] = lut[2][p[2]];
  }
}

void invert(std::uint8_t* rgb, std::size_t pixels) {
  for (std::size_t i = 0; i < pixels * 3; ++i) rgb[i] = static_cast<std::uint8_t>(255 - rgb[i]);
}

// adjust_sharpness: sharpness.cpp.

void apply_policy_op(std::uint8_t* rgb, int width, int height, const augment::PolicyDraw& d,
                     augment::Interpolation mode) {
  using augment::PolicyOp;
  thread_local std::vector<std::uint8_t> scratch;
  const std::size_t pixels = std::size_t(width) * height;
  const double m = d.magnitude;
  augment::AffineParams a;
  switch (d.op) {
    case PolicyOp::kIdentity:
      return;
    case PolicyOp::kShearX:
    case PolicyOp::kShearY: {
      // degrees(atan(m)) about center=[0, 0], the top-left corner: torchvision's center_f of
      // it is (0 - w/2, 0 - h/2).
      const double deg = std::atan(m) * 180.0 / M_PI;
      a.shear = d.op == PolicyOp::kShearX ? std::array<double, 2>{deg, 0.0} : std::array<double, 2>{0.0, deg};
      a.center = {-width * 0.5, -height * 0.5};
      augment::affine(rgb, width, height, a, mode, nullptr, scratch);
      return;
    }
    case PolicyOp::kTranslateX:
    case PolicyOp::kTranslateY: {
      const double t = std::trunc(m);  // int(magnitude)
      a.translate = d.op == PolicyOp::kTranslateX ? std::array<double, 2>{t, 0.0} : std::array<double, 2>{0.0, t};
      augment::affine(rgb, width, height, a, mode, nullptr, scratch);
      return;
    }
    case PolicyOp::kRotate:
      augment::rotate(rgb, width, height, m, mode, nullptr, scratch);
      return;
    case PolicyOp::kBrightness: adjust_brightness(rgb, pixels, 1.0 + m); return;
    case PolicyOp::kColor: adjust_saturation(rgb, pixels, 1.0 + m); return;
    case PolicyOp::kContrast: adjust_contrast(rgb, pixels, 1.0 + m); return;
    case PolicyOp::kSharpness: adjust_sharpness(rgb, width, height, 1.0 + m); return;
    case PolicyOp::kPosterize: posterize(rgb, pixels, static_cast<int>(m)); return;
    // img >= threshold compares in float32: the integer threshold is its ceiling.
    case PolicyOp::kSolarize: solarize(rgb, pixels, static_cast<int>(std::ceil(static_cast<float>(m)))); return;
    case PolicyOp::kAutoContrast: autocontrast(rgb, pixels); return;
    case PolicyOp::kEqualize: equalize(rgb, pixels); return;
    case PolicyOp::kInvert: invert(rgb, pixels); return;
  }
}

void apply_augment(const std::vector<AugmentStep>& steps, std::uint8_t* rgb, int width, int height, CounterRng& rng) {
  augment::clear_avx_upper_state();  // the decode and resample before may leave it dirty
  const std::size_t pixels = std::size_t(width) * height;
  for (const AugmentStep& s : steps) {
    switch (s.kind) {
      case AugmentStep::Kind::kColorJitter: {
        // As ColorJitter.get_params: a random order of the four, then each factor drawn.
        int order[4] = {0, 1, 2, 3};
        for (int i = 3; i > 0; --i) std::swap(order[i], order[rng.below(static_cast<std::uint64_t>(i) + 1)]);
        const double b = rng.uniform(s.brightness[0], s.brightness[1]);
        const double c = rng.uniform(s.contrast[0], s.contrast[1]);
        const double t = rng.uniform(s.saturation[0], s.saturation[1]);
        // Drawn only when hue is on, so configs without hue keep the draws (and batches) they had.
        const bool hue_on = s.hue != std::array<double, 2>{0, 0};
        const double h = hue_on ? rng.uniform(s.hue[0], s.hue[1]) : 0.0;
        for (int k : order) {
          if (k == 0 && s.brightness != std::array<double, 2>{1, 1}) adjust_brightness(rgb, pixels, b);
          if (k == 1 && s.contrast != std::array<double, 2>{1, 1}) adjust_contrast(rgb, pixels, c);
          if (k == 2 && s.saturation != std::array<double, 2>{1, 1}) adjust_saturation(rgb, pixels, t);
          if (k == 3 && hue_on) augment::adjust_hue(rgb, pixels, h);
        }
        break;
      }
      case AugmentStep::Kind::kGrayscale:
        if (rng.uniform() < s.p) to_grayscale(rgb, pixels);
        break;
      case AugmentStep::Kind::kSolarize:
        if (rng.uniform() < s.p) solarize(rgb, pixels, s.threshold);
        break;
      case AugmentStep::Kind::kPosterize:
        if (rng.uniform() < s.p) posterize(rgb, pixels, s.bits);
        break;
      case AugmentStep::Kind::kAutocontrast:
        if (rng.uniform() < s.p) autocontrast(rgb, pixels);
        break;
      case AugmentStep::Kind::kEqualize:
        if (rng.uniform() < s.p) equalize(rgb, pixels);
        break;
      case AugmentStep::Kind::kSharpness:
        if (rng.uniform() < s.p) adjust_sharpness(rgb, width, height, s.sharpness);
        break;
      case AugmentStep::Kind::kGaussianBlur: {
        const double sigma = rng.uniform(s.sigma[0], s.sigma[1]);
        augment::gaussian_blur(rgb, width, height, s.kernel[0], s.kernel[1], sigma, sigma);
        break;
      }
      case AugmentStep::Kind::kRotation: {
        const double angle = rng.uniform(s.degrees[0], s.degrees[1]);
        thread_local std::vector<std::uint8_t> scratch;
        augment::rotate(rgb, width, height, angle, s.interpolation, s.fill, scratch);
        break;
      }
      case AugmentStep::Kind::kAffine: {
        thread_local std::vector<std::uint8_t> scratch;
        augment::affine(rgb, width, height, augment::draw_random_affine(s.affine, width, height, rng), s.interpolation,
                        &s.fill, scratch);
        break;
      }
      case AugmentStep::Kind::kPolicy: {
        const augment::PolicyDraws d = augment::draw_policy(s.policy, height, width, rng);
        for (int i = 0; i < d.count; ++i) apply_policy_op(rgb, width, height, d.ops[i], s.policy.interpolation);
        break;
      }
      case AugmentStep::Kind::kErasing:
        augment::erase_rgb8(rgb, width, augment::erase_box(s.erasing, height, width, rng), s.erasing);
        break;
    }
  }
}

}  // namespace stoker::augment
