// Antialiased bilinear resampling with PIL's filter (the one torchvision uses on PIL images):
// a triangle filter whose support widens with the downscale factor, weights normalized per
// output pixel and clipped at the clip rectangle, fixed point.
//
// Speed: both passes run as *vertical* passes over contiguous rows (the inner loop is a
// multiply-add along memory, which the compiler vectorizes), each storing its result
// transposed: after two passes the image is row-major again. A horizontal pass over
// interleaved RGB would be a gather per tap and cost several times more.
#pragma once

#include <cstdint>
#include <vector>

namespace stoker::image {

inline constexpr int kPrecisionBits = 14;  // weights fit int16; 255 * 2^14 * taps fits int32

// Filter taps of one axis: output i reads `count[i]` source pixels from `first[i]`
// (absolute source coordinates) with weights `weights[i * taps ...]`.
struct AxisTaps {
  int taps = 0;                       // max taps per output (row stride of `weights`)
  std::vector<int> first, count;
  std::vector<std::int16_t> weights;  // fixed point, each row sums to ~1 << kPrecisionBits
  int lo() const;                     // smallest source index read
  int hi() const;                     // one past the largest source index read
};

// Source interval [box0, box1) mapped onto `out` pixels; the filter reads only pixels in
// [clip0, clip1) (integers, within the source).
void compute_taps(double box0, double box1, int out, int clip0, int clip1, AxisTaps& taps);

// Reusable buffers of one thread.
struct ResampleScratch {
  std::vector<std::uint8_t> a;
  std::vector<std::int32_t> acc;
};

// src: RGB rows of a window whose top-left source pixel is (win_x, win_y), `stride` bytes per
// row. dst: out_w x out_h RGB, tightly packed.
void resample_rgb(const std::uint8_t* src, int stride, int win_x, int win_y, const AxisTaps& xt,
                  const AxisTaps& yt, std::uint8_t* dst, ResampleScratch& scratch);

}  // namespace stoker::image
