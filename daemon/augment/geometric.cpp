#include "augment/geometric.hpp"

#include <cmath>
#include <cstring>

namespace stoker::augment {
namespace {

// torch.linspace(start, end, steps) in float32: the first half counts up from start, the
// second half down from end (ATen's RangeFactories), so both ends are exact.
float linspace_at(float start, float end, int steps, int i) {
  if (steps == 1) return start;
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int half = steps / 2;
  return i < half ? start + step * static_cast<float>(i) : end - step * static_cast<float>(steps - i - 1);
}

inline std::uint8_t round_u8(float v) {
  return static_cast<std::uint8_t>(std::fmin(255.0f, std::fmax(0.0f, std::nearbyint(v))));
}

}  // namespace

void rotate(std::uint8_t* rgb, int width, int height, double degrees, Interpolation mode,
            const std::array<float, 3>& fill, std::vector<std::uint8_t>& scratch) {
  // functional.rotate: _get_inverse_affine_matrix(center 0, -angle, ...) in double, then a
  // float32 theta; the rows are [cos a, -sin a, 0] and [sin a, cos a, 0] for angle a.
  const double rad = -degrees * M_PI / 180.0;  // math.radians(-angle)
  const float t00 = static_cast<float>(std::cos(rad)), t01 = static_cast<float>(std::sin(rad));
  const float t10 = static_cast<float>(-std::sin(rad)), t11 = static_cast<float>(std::cos(rad));
  // rescaled_theta = theta^T / [0.5 w, 0.5 h] (float32, one division per entry)
  const float hw = 0.5f * static_cast<float>(width), hh = 0.5f * static_cast<float>(height);
  const float r00 = t00 / hw, r01 = t01 / hw, r10 = t10 / hh, r11 = t11 / hh;
  scratch.assign(rgb, rgb + static_cast<std::size_t>(width) * height * 3);
  const std::uint8_t* src = scratch.data();
  const float fw = static_cast<float>(width), fh = static_cast<float>(height);
  for (int i = 0; i < height; ++i) {
    const float y = linspace_at(-fh * 0.5f + 0.5f, fh * 0.5f + 0.5f - 1.0f, height, i);
    for (int j = 0; j < width; ++j) {
      const float x = linspace_at(-fw * 0.5f + 0.5f, fw * 0.5f + 0.5f - 1.0f, width, j);
      // base_grid (x, y, 1) . rescaled_theta (the translation terms are 0 here)
      const float gx = x * r00 + y * r01;
      const float gy = x * r10 + y * r11;
      // The CPU grid_sample kernel's unnormalize (align_corners=False): (g + 1) * size/2 - 0.5
      const float ix = (gx + 1.0f) * (fw / 2.0f) - 0.5f;
      const float iy = (gy + 1.0f) * (fh / 2.0f) - 0.5f;
      std::uint8_t* out = rgb + (static_cast<std::size_t>(i) * width + j) * 3;
      if (mode == Interpolation::kNearest) {
        const int nx = static_cast<int>(std::nearbyint(ix)), ny = static_cast<int>(std::nearbyint(iy));
        if (nx >= 0 && nx < width && ny >= 0 && ny < height) {
          std::memcpy(out, src + (static_cast<std::size_t>(ny) * width + nx) * 3, 3);
        } else {
          for (int c = 0; c < 3; ++c) out[c] = round_u8(fill[c]);
        }
        continue;
      }
      // Weights as the CPU kernel forms them: fractions w (east) and n (south) of the floor.
      const float x0 = std::floor(ix), y0 = std::floor(iy);
      const float fe = ix - x0, fs = iy - y0, fwst = 1.0f - fe, fnth = 1.0f - fs;
      const float w_nw = fnth * fwst, w_ne = fnth * fe, w_sw = fs * fwst, w_se = fs * fe;
      const int xi = static_cast<int>(x0), yi = static_cast<int>(y0);
      const bool in_x0 = xi >= 0 && xi < width, in_x1 = xi + 1 >= 0 && xi + 1 < width;
      const bool in_y0 = yi >= 0 && yi < height, in_y1 = yi + 1 >= 0 && yi + 1 < height;
      // The mask channel (all ones) sampled the same way: the in-image weight.
      float mask = 0;
      if (in_x0 && in_y0) mask += w_nw;
      if (in_x1 && in_y0) mask += w_ne;
      if (in_x0 && in_y1) mask += w_sw;
      if (in_x1 && in_y1) mask += w_se;
      for (int c = 0; c < 3; ++c) {
        auto at = [&](int xx, int yy) { return static_cast<float>(src[(static_cast<std::size_t>(yy) * width + xx) * 3 + c]); };
        float v = 0;  // grid_sample's order: nw, ne, sw, se
        if (in_x0 && in_y0) v += at(xi, yi) * w_nw;
        if (in_x1 && in_y0) v += at(xi + 1, yi) * w_ne;
        if (in_x0 && in_y1) v += at(xi, yi + 1) * w_sw;
        if (in_x1 && in_y1) v += at(xi + 1, yi + 1) * w_se;
        out[c] = round_u8(v * mask + (1.0f - mask) * fill[c]);
      }
    }
  }
}

}  // namespace stoker::augment
