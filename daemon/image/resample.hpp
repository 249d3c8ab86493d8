// PIL-compatible antialiased bilinear resampling (the filter torchvision uses on PIL images):
// a triangle filter whose support widens with the downscale factor, weights normalized per
// output pixel, fixed-point with 22 fractional bits, horizontal pass then vertical pass with
// the intermediate rounded to 8 bits, as PIL does, so results match PIL within rounding.
#pragma once

#include <cstdint>
#include <vector>

namespace stoker::image {

// Filter taps of one axis: output i reads `count[i]` source pixels from `first[i]`
// (absolute source coordinates) with weights `weights[i * taps ...]`.
struct AxisTaps {
  int taps = 0;                       // max taps per output (row stride of `weights`)
  std::vector<int> first, count;
  std::vector<std::int32_t> weights;  // fixed point, sum ~ 1 << kPrecisionBits
  int lo() const;                     // smallest source index read
  int hi() const;                     // one past the largest source index read
};

inline constexpr int kPrecisionBits = 22;

// Source interval [box0, box1) mapped onto `out` pixels; the filter reads only pixels in
// [clip0, clip1) (integers, within the source).
void compute_taps(double box0, double box1, int out, int clip0, int clip1, AxisTaps& taps);

// src: RGB rows of a window whose top-left source pixel is (win_x, win_y), `stride` bytes per
// row. dst: out_w x out_h RGB, tightly packed. `scratch` is reused between calls.
void resample_rgb(const std::uint8_t* src, int stride, int win_x, int win_y, const AxisTaps& xt,
                  const AxisTaps& yt, std::uint8_t* dst, std::vector<std::uint8_t>& scratch);

}  // namespace stoker::image
