// Affine warps with torchvision 0.14's tensor semantics (functional.affine / functional.rotate
// with expand=False): _get_inverse_affine_matrix in double (about the image centre, or about
// any point given relative to it), the matrix as a float32 theta, _gen_affine_grid mapping each
// output pixel centre to normalized source coordinates in float32, and grid_sample
// (align_corners=False, zeros padding) sampling it in one pass. Back to uint8 rounded half to
// even.
//
// Fill: torchvision treats "a fill" and "no fill" differently, and both occur. With a fill
// (RandomRotation and RandomAffine always pass one, default 0) the in-image weight m of each
// output pixel blends: out = sample * m + (1 - m) * fill (nearest: fill where the nearest
// source pixel is outside). Without one (the automatic policies' default fill=None) pixels
// from outside are zeros inside the interpolation and nothing is blended.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/rng.hpp"

namespace stoker::augment {

enum class Interpolation : std::uint8_t { kNearest, kBilinear };

// What functional.affine takes. `center` is relative to the image centre in pixels
// (torchvision's center_f: {0, 0} is the centre, {-w/2, -h/2} the top-left corner).
struct AffineParams {
  double angle = 0;                       // degrees, as functional.affine's `angle`
  std::array<double, 2> translate{0, 0};  // pixels (x, y)
  double scale = 1;                       // > 0
  std::array<double, 2> shear{0, 0};      // degrees (x, y)
  std::array<double, 2> center{0, 0};
};

// torchvision's _get_inverse_affine_matrix(center, angle, translate, scale, shear), in double:
// maps output coordinates to source coordinates, both relative to the image centre.
std::array<double, 6> inverse_affine_matrix(const AffineParams& a);

// Packed RGB `width` x `height`, in place, through the inverse matrix `m` (float32 theta as
// torch builds it). `fill` null: no fill (zeros padding, no blending). `scratch` keeps its
// capacity between calls.
void warp_affine(std::uint8_t* rgb, int width, int height, const std::array<double, 6>& m, Interpolation mode,
                 const std::array<float, 3>* fill, std::vector<std::uint8_t>& scratch);

// functional.affine(img, angle, translate, scale, shear, interpolation, fill, center).
void affine(std::uint8_t* rgb, int width, int height, const AffineParams& a, Interpolation mode,
            const std::array<float, 3>* fill, std::vector<std::uint8_t>& scratch);

// functional.rotate(img, degrees, interpolation, expand=False, fill): about the centre,
// positive turns the content counter-clockwise.
void rotate(std::uint8_t* rgb, int width, int height, double degrees, Interpolation mode,
            const std::array<float, 3>* fill, std::vector<std::uint8_t>& scratch);
inline void rotate(std::uint8_t* rgb, int width, int height, double degrees, Interpolation mode,
                   const std::array<float, 3>& fill, std::vector<std::uint8_t>& scratch) {
  rotate(rgb, width, height, degrees, mode, &fill, scratch);
}

// RandomAffine's ranges (transforms.py, 0.14), as its constructor normalizes them.
struct RandomAffineParams {
  std::array<double, 2> degrees{0, 0};
  bool has_translate = false;
  std::array<double, 2> translate{0, 0};  // maximum fractions of width and height
  bool has_scale = false;
  std::array<double, 2> scale{1, 1};
  int shear_ranges = 0;                   // 0, 1 (x only) or 2 (x and y)
  std::array<double, 4> shear{0, 0, 0, 0};
};

// RandomAffine.get_params' draws in its order (angle; tx, ty if translate; scale if given;
// shear x, then y if given), translations rounded half to even as Python's round(); centre 0.
AffineParams draw_random_affine(const RandomAffineParams& r, int width, int height, CounterRng& rng);

}  // namespace stoker::augment
