// Colour augmentations of today's training recipes, on the upright uint8 HWC image after the
// geometry step, with torchvision 0.14's semantics for uint8 tensors (functional_tensor.py):
// the same float32 arithmetic in the same order and the same truncation back to uint8, so a
// step given the same parameters gives torchvision's pixels (tests/fidelity/augment_fidelity.py).
// Randomness comes from the sample's CounterRng, never from which worker ran first.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "augment/erasing.hpp"
#include "augment/geometric.hpp"
#include "augment/policies.hpp"
#include "core/rng.hpp"

namespace stoker::augment {

struct AugmentStep {
  enum class Kind : std::uint8_t {
    kColorJitter, kGrayscale, kSolarize, kPosterize, kAutocontrast, kEqualize, kSharpness,
    kGaussianBlur,  // daemon/augment/blur.hpp
    kErasing,       // daemon/augment/erasing.hpp, on uint8 pixels (before normalize)
    kRotation,      // daemon/augment/geometric.hpp
    kAffine,        // random_affine, daemon/augment/geometric.hpp
    kPolicy,        // trivial_augment_wide / rand_augment / auto_augment, daemon/augment/policies.hpp
  };
  Kind kind = Kind::kColorJitter;
  double p = 1.0;  // probability the step applies (random_* steps)
  // color_jitter: factor ranges as torchvision builds them ([max(0, 1-x), 1+x] for a number x);
  // an empty range (lo == hi == 1) leaves that property out.
  std::array<double, 2> brightness{1, 1}, contrast{1, 1}, saturation{1, 1};
  // color_jitter hue: the shift's range within [-0.5, 0.5]; {0, 0} leaves hue out.
  std::array<double, 2> hue{0, 0};
  int threshold = 128;  // solarize: pixels >= threshold are inverted
  int bits = 8;         // posterize: bits kept per channel
  double sharpness = 1;  // adjust_sharpness: the factor (0 blurred, 1 unchanged, 2 sharper)
  // gaussian_blur: torchvision's kernel_size (x, y), odd; sigma drawn uniformly in [lo, hi]
  // once per sample and used for both axes (GaussianBlur.forward).
  std::array<int, 2> kernel{3, 3};
  std::array<double, 2> sigma{0.1, 2.0};
  augment::ErasingParams erasing;  // kErasing
  // random_rotation: the angle in degrees drawn uniformly in [lo, hi] per sample.
  std::array<double, 2> degrees{0, 0};
  augment::Interpolation interpolation = augment::Interpolation::kNearest;
  std::array<float, 3> fill{0, 0, 0};  // pixel units, for what comes from outside the image
  // random_affine: its ranges (interpolation and fill as above).
  augment::RandomAffineParams affine;
  augment::PolicyParams policy;  // kPolicy (its own interpolation; no fill: black, as torchvision's None)
};

// The individual operations (exposed for the fidelity probe and tests).
void adjust_brightness(std::uint8_t* rgb, std::size_t pixels, double factor);
void adjust_contrast(std::uint8_t* rgb, std::size_t pixels, double factor);
void adjust_saturation(std::uint8_t* rgb, std::size_t pixels, double factor);
void to_grayscale(std::uint8_t* rgb, std::size_t pixels);
void solarize(std::uint8_t* rgb, std::size_t pixels, int threshold);
void posterize(std::uint8_t* rgb, std::size_t pixels, int bits);
void autocontrast(std::uint8_t* rgb, std::size_t pixels);
void equalize(std::uint8_t* rgb, std::size_t pixels);
void invert(std::uint8_t* rgb, std::size_t pixels);
// Needs the image's shape (a 3x3 smoothing filter; the border keeps its pixels, as torchvision).
void adjust_sharpness(std::uint8_t* rgb, int width, int height, double factor);

// torchvision's autoaugment._apply_op(img, op, magnitude, interpolation, fill=None) for one
// drawn op (its magnitude already signed).
void apply_policy_op(std::uint8_t* rgb, int width, int height, const augment::PolicyDraw& d,
                     augment::Interpolation mode);

// Applies `steps` in order to the packed RGB image, drawing from `rng`.
void apply_augment(const std::vector<AugmentStep>& steps, std::uint8_t* rgb, int width, int height, CounterRng& rng);

}  // namespace stoker::augment
