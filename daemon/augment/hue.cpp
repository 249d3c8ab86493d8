#include "augment/hue.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "augment/pixel_math.hpp"

namespace stoker::augment {
namespace {

// fmod(a, 1) for |a| < 2^31: a minus its integer part, which is exact (the fraction of a
// float is always representable), as fmod is; inline, where std::fmod is a library call.
inline float fmod1(float a) { return a - static_cast<float>(static_cast<std::int32_t>(a)); }

// torch.remainder for floats (ATen 1.13): fmod, moved into the divisor's sign.
inline float remainder1(float a) {
  const float m = fmod1(a);
  return m < 0 ? m + 1.0f : m;
}

inline float clamp01(float x) { return std::min(1.0f, std::max(0.0f, x)); }

}  // namespace

void adjust_hue(std::uint8_t* rgb, std::size_t pixels, double factor) {
  // Every expression below is torch's, in float32 and in torch's order (no -ffast-math and no
  // FMA contraction in this build), so pixels agree with torchvision bit for bit but where
  // torch's vectorised division rounds differently.
  const float hue = static_cast<float>(factor);
  for (std::size_t i = 0; i < pixels; ++i) {
    std::uint8_t* px = rgb + 3 * i;
    const float r = static_cast<float>(px[0]) / 255.0f;
    const float g = static_cast<float>(px[1]) / 255.0f;
    const float b = static_cast<float>(px[2]) / 255.0f;
    // _rgb2hsv
    const float maxc = std::max({r, g, b}), minc = std::min({r, g, b});
    const bool eqc = maxc == minc;
    const float cr = maxc - minc;
    const float s = cr / (eqc ? 1.0f : maxc);
    const float div = eqc ? 1.0f : cr;
    const float rc = (maxc - r) / div, gc = (maxc - g) / div, bc = (maxc - b) / div;
    const float hr = maxc == r ? bc - gc : 0.0f;
    const float hg = maxc == g && maxc != r ? (2.0f + rc) - bc : 0.0f;
    const float hb = maxc != g && maxc != r ? (4.0f + gc) - rc : 0.0f;
    float h = fmod1((hr + hg + hb) / 6.0f + 1.0f);
    // the shift
    h = remainder1(h + hue);
    // _hsv2rgb (the einsum with a one-hot mask picks one value exactly)
    const float h6 = h * 6.0f;
    const float fi = floor_small(h6);
    const float f = h6 - fi;
    const int sector = static_cast<int>(fi) % 6;
    const float v = maxc;
    const float p = clamp01(v * (1.0f - s));
    const float q = clamp01(v * (1.0f - s * f));
    const float t = clamp01(v * (1.0f - s * (1.0f - f)));
    // The sector's (r, g, b) = (v,t,p) (q,v,p) (p,v,t) (p,q,v) (t,p,v) (v,p,q), as selects
    // rather than a switch (fewer mispredicted branches).
    float o[3];
    o[0] = sector == 0 || sector == 5 ? v : sector == 1 ? q : sector == 4 ? t : p;
    o[1] = sector == 0 ? t : sector == 1 || sector == 2 ? v : sector == 3 ? q : p;
    o[2] = sector <= 1 ? p : sector == 2 ? t : sector == 3 || sector == 4 ? v : q;
    // `(x * 255.0).to(torch.uint8)`: truncation; x is within [0, 1], so no clamp is needed.
    for (int c = 0; c < 3; ++c) px[c] = static_cast<std::uint8_t>(o[c] * 255.0f);
  }
}

}  // namespace stoker::augment
