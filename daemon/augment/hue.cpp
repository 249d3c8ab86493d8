#include "augment/hue.hpp"

#include <algorithm>
#include <cmath>

namespace stoker::augment {
namespace {

// torch.remainder for floats (ATen 1.13): fmod, moved into the divisor's sign.
inline float remainder1(float a) {
  float m = std::fmod(a, 1.0f);
  if (m != 0 && m < 0) m += 1.0f;
  return m;
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
    float h = std::fmod((hr + hg + hb) / 6.0f + 1.0f, 1.0f);
    // the shift
    h = remainder1(h + hue);
    // _hsv2rgb (the einsum with a one-hot mask picks one value exactly)
    const float h6 = h * 6.0f;
    const float fi = std::floor(h6);
    const float f = h6 - fi;
    const int sector = static_cast<int>(fi) % 6;
    const float v = maxc;
    const float p = clamp01(v * (1.0f - s));
    const float q = clamp01(v * (1.0f - s * f));
    const float t = clamp01(v * (1.0f - s * (1.0f - f)));
    float o[3];
    switch (sector) {
      case 0: o[0] = v, o[1] = t, o[2] = p; break;
      case 1: o[0] = q, o[1] = v, o[2] = p; break;
      case 2: o[0] = p, o[1] = v, o[2] = t; break;
      case 3: o[0] = p, o[1] = q, o[2] = v; break;
      case 4: o[0] = t, o[1] = p, o[2] = v; break;
      default: o[0] = v, o[1] = p, o[2] = q; break;
    }
    // `(x * 255.0).to(torch.uint8)`: truncation; x is within [0, 1], so no clamp is needed.
    for (int c = 0; c < 3; ++c) px[c] = static_cast<std::uint8_t>(o[c] * 255.0f);
  }
}

}  // namespace stoker::augment
