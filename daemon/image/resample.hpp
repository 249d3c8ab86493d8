// Resampling with PIL's filters (the ones torchvision uses on PIL images): antialiased bilinear
// (triangle, support 1) and bicubic (Keys, a = -0.5, support 2), whose support widens with the
// downscale factor, weights normalized per output pixel and clipped at the clip rectangle,
// fixed point; and nearest (one tap of weight 1, PIL's affine nearest indices).
//
// Speed: both passes run as *vertical* passes over contiguous rows (the inner loop is a
// multiply-add along memory, which the compiler vectorizes), each storing its result
// transposed: after two passes the image is row-major again. A horizontal pass over
// interleaved RGB would be a gather per tap and cost several times more.
#pragma once

#include <cstdint>
#include <vector>

#include "image/resize_filter.hpp"

namespace stoker::image {

inline constexpr int kPrecisionBits = 14;  // weights fit int16; 255 * 2^14 * taps fits int32
inline constexpr int kPilPrecisionBits = 22;  // PIL's for 8-bit images (32 - 8 - 2)

// Filter taps of one axis: output i reads `count[i]` source pixels from `first[i]`
// (absolute source coordinates) with weights `weights[i * taps ...]`.
struct AxisTaps {
  int taps = 0;                       // max taps per output (row stride of `weights`)
  std::vector<int> first, count;
  std::vector<std::int16_t> weights;  // fixed point, each row sums to ~1 << kPrecisionBits
  // The same weights at PIL's precision (22 bits), for the horizontal-first (bicubic) path:
  // with negative lobes a 14-bit rounding in the first pass can move the second by 2 levels.
  std::vector<std::int32_t> weights22;
  int lo() const;                     // smallest source index read
  int hi() const;                     // one past the largest source index read
};

// Source interval [box0, box1) mapped onto `out` pixels; the filter reads only pixels in
// [clip0, clip1) (integers, within the source).
// `filter` kBilinear or kBicubic (kNearest has its own taps: nearest_taps).
void compute_taps(double box0, double box1, int out, int clip0, int clip1, AxisTaps& taps,
                  ResizeFilter filter = ResizeFilter::kBilinear);

// PIL's nearest resize of one axis (Image.resize(NEAREST), ImagingScaleAffine): output j of a
// resize of [origin, origin + n) to m pixels reads source pixel origin + int(x_j), where x_j
// starts at step / 2 and grows by step = n / m in double arithmetic, exactly as PIL adds it up.
// The taps are outputs skip .. skip + out - 1 (a center crop of the resize keeps those).
// mirrored: the stored axis runs the other way (EXIF orientation): tap i is then
// size - 1 - (upright tap out - 1 - i). Indices are clamped to [0, size).
struct NearestAxis {
  long origin = 0;   // first source pixel of the resized interval (upright)
  double step = 1;   // source pixels per output pixel
  long skip = 0;     // resized pixels before the first output (center crop offset)
};
void nearest_taps(const NearestAxis& axis, int out, int size, bool mirrored, AxisTaps& taps);

// Reusable buffers of one thread.
struct ResampleScratch {
  std::vector<std::uint8_t> a;
  std::vector<std::int32_t> acc;
};

// src: RGB rows of a window whose top-left source pixel is (win_x, win_y), `stride` bytes per
// row. dst: out_w x out_h RGB, tightly packed. Each pass clips to 0..255; with a filter that
// has negative lobes (bicubic) the order of the passes then decides which overshoots are cut:
// horizontal_first runs PIL's order (horizontal, then vertical; slower: the horizontal pass
// gathers), otherwise vertical first (the fast path; the same values for bilinear and nearest,
// whose weights are never negative, up to a level of rounding).
void resample_rgb(const std::uint8_t* src, int stride, int win_x, int win_y, const AxisTaps& xt,
                  const AxisTaps& yt, std::uint8_t* dst, ResampleScratch& scratch,
                  bool horizontal_first = false);

}  // namespace stoker::image
