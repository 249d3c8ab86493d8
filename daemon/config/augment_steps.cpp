// The parameters of the augmentation steps of a pipeline (color_jitter ... random_erasing),
// read as torchvision's transforms of the same names take them, defaults included. The
// structs they fill, the drawing and the pixels live in daemon/augment/; this file holds only
// the YAML side, since augment/ does not depend on yaml-cpp. Where a step may stand in the
// pipeline (after the geometry, before normalize...) is decided in pipeline_steps.cpp.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <string_view>

#include "augment/geometric.hpp"
#include "augment/policies.hpp"
#include "config/sections.hpp"

namespace stoker::config {
namespace {

// interpolation: nearest or bilinear (the two torchvision's tensor warps offer).
augment::Interpolation parse_interpolation(const Reader& r, const Value& v) {
  return r.choice(v, {"nearest", "bilinear"}) == "bilinear" ? augment::Interpolation::kBilinear
                                                            : augment::Interpolation::kNearest;
}

// fill: a pixel value 0..255 or [r, g, b].
std::array<float, 3> parse_fill(const Reader& r, const Value& v) {
  auto one = [&](const Value& x) {
    const double p = r.number(x);
    if (!(p >= 0 && p <= 255)) r.fail(x, "must be a pixel value within [0, 255]");
    return static_cast<float>(p);
  };
  std::array<float, 3> fill{};
  if (v.node.IsSequence()) {
    if (v.node.size() != 3) r.fail(v, "expected a number or a list of 3 (R, G, B)");
    for (std::size_t c = 0; c < 3; ++c) fill[c] = one(r.element(v, c));
  } else {
    fill.fill(one(v));
  }
  return fill;
}

// An angle range as torchvision's _setup_angle: a number d >= 0 meaning [-d, d], or [min, max].
std::array<double, 2> parse_angle_range(const Reader& r, const Value& d) {
  if (d.node.IsSequence()) {
    const auto q = r.numbers(d, 2);
    if (!(q[0] <= q[1])) r.fail(d, "must be [min, max] with min <= max");
    return {q[0], q[1]};
  }
  const double x = r.number(d);
  if (x < 0) r.fail(d, "must be >= 0 (the angle is drawn in [-degrees, degrees])");
  return {-x, x};
}

}  // namespace

// color_jitter as torchvision's ColorJitter; random_grayscale, random_solarize, random_posterize,
// random_autocontrast, random_equalize, random_adjust_sharpness as the Random* transforms, with
// their p defaults.
augment::AugmentStep parse_color_step(const Reader& r, const Value& body, const std::string& name) {
  augment::AugmentStep a;
  if (name == "color_jitter") {
    // A number x means [max(0, 1 - x), 1 + x]; a pair [lo, hi] is used as it is (torchvision).
    const Fields f(r, body, {"brightness", "contrast", "saturation", "hue"});
    a.kind = augment::AugmentStep::Kind::kColorJitter;
    auto range = [&](const char* key, std::array<double, 2>& out) {
      const Value* v = f.get(key);
      if (v == nullptr) return;
      if (v->node.IsSequence()) {
        const auto q = r.numbers(*v, 2);
        if (!(q[0] >= 0 && q[0] <= q[1])) r.fail(*v, "must be [min, max] with 0 <= min <= max");
        out = {q[0], q[1]};
      } else {
        const double x = r.number(*v);
        if (x < 0) r.fail(*v, "must be >= 0");
        out = {std::max(0.0, 1 - x), 1 + x};
      }
    };
    range("brightness", a.brightness);
    range("contrast", a.contrast);
    range("saturation", a.saturation);
    // hue: a number h in [0, 0.5] means [-h, h]; a pair within [-0.5, 0.5] (a full turn is 1).
    if (const Value* v = f.get("hue")) {
      if (v->node.IsSequence()) {
        const auto q = r.numbers(*v, 2);
        if (!(-0.5 <= q[0] && q[0] <= q[1] && q[1] <= 0.5)) {
          r.fail(*v, "must be [min, max] with -0.5 <= min <= max <= 0.5");
        }
        a.hue = {q[0], q[1]};
      } else {
        const double x = r.number(*v);
        if (!(x >= 0 && x <= 0.5)) r.fail(*v, "must be within [0, 0.5] (the shift is drawn in [-hue, hue])");
        a.hue = {-x, x};
      }
    }
  } else {
    const bool solar = name == "random_solarize", poster = name == "random_posterize",
               sharp = name == "random_adjust_sharpness";
    const Fields f(r, body, solar    ? std::initializer_list<std::string_view>{"threshold", "p"}
                            : poster ? std::initializer_list<std::string_view>{"bits", "p"}
                            : sharp  ? std::initializer_list<std::string_view>{"sharpness_factor", "p"}
                                     : std::initializer_list<std::string_view>{"p"});
    a.kind = name == "random_grayscale"  ? augment::AugmentStep::Kind::kGrayscale
             : solar                      ? augment::AugmentStep::Kind::kSolarize
             : poster                     ? augment::AugmentStep::Kind::kPosterize
             : sharp                      ? augment::AugmentStep::Kind::kSharpness
             : name == "random_equalize" ? augment::AugmentStep::Kind::kEqualize
                                          : augment::AugmentStep::Kind::kAutocontrast;
    if (sharp) {
      const Value& v = f.need("sharpness_factor");
      a.sharpness = r.number(v);
      if (a.sharpness < 0) r.fail(v, "must be >= 0");
    }
    a.p = name == "random_grayscale" ? 0.1 : 0.5;  // torchvision's defaults
    if (auto* v = f.get("p")) {
      a.p = r.number(*v);
      if (a.p < 0 || a.p > 1) r.fail(*v, "must be within [0, 1]");
    }
    if (solar) a.threshold = static_cast<int>(r.integer(f.need("threshold"), 0, 256));
    if (poster) a.bits = static_cast<int>(r.integer(f.need("bits"), 0, 8));
  }
  return a;
}

// gaussian_blur: {kernel_size, sigma} as torchvision's GaussianBlur: kernel_size (required) an
// odd positive int or [kx, ky] (torchvision's order: x is across, y down); sigma a number > 0
// or [min, max] with 0 < min <= max, default [0.1, 2.0]. Reflect padding needs kernel/2 pixels
// to mirror on each side, so the kernel must fit the output (torch raises otherwise).
augment::AugmentStep parse_gaussian_blur(const Reader& r, const Value& body, const image::PipelineSpec& spec,
                                         bool size_pending) {
  const Fields f(r, body, {"kernel_size", "sigma"});
  augment::AugmentStep a;
  a.kind = augment::AugmentStep::Kind::kGaussianBlur;
  const Value& k = f.need("kernel_size");
  auto odd = [&](const Value& v) {
    const auto n = static_cast<int>(r.integer(v, 1, kMaxSide));
    if (n % 2 == 0) r.fail(v, "must be odd (the kernel is centred on the pixel), got " + std::to_string(n));
    return n;
  };
  if (k.node.IsSequence()) {
    if (k.node.size() != 2) r.fail(k, "expected an odd integer or a list [kx, ky] of two");
    a.kernel = {odd(r.element(k, 0)), odd(r.element(k, 1))};
  } else {
    a.kernel[0] = a.kernel[1] = odd(k);
  }
  // (With `resize: {size: N}` still waiting for its center_crop the size is not known yet;
  // the missing center_crop is refused at the end of the pipeline.)
  if (!size_pending && (a.kernel[0] / 2 >= static_cast<int>(spec.out_width) ||
                        a.kernel[1] / 2 >= static_cast<int>(spec.out_height))) {
    r.fail(k, "a " + std::to_string(a.kernel[0]) + "x" + std::to_string(a.kernel[1]) + " kernel needs an output of at least " +
                  std::to_string(a.kernel[0] / 2 + 1) + "x" + std::to_string(a.kernel[1] / 2 + 1) +
                  " (width x height) to reflect into, this one is " + std::to_string(spec.out_width) + "x" +
                  std::to_string(spec.out_height));
  }
  if (const Value* v = f.get("sigma")) {
    if (v->node.IsSequence()) {
      const auto q = r.numbers(*v, 2);
      if (!(q[0] > 0 && q[0] <= q[1])) r.fail(*v, "must be [min, max] with 0 < min <= max");
      a.sigma = {q[0], q[1]};
    } else {
      const double x = r.number(*v);
      if (!(x > 0)) r.fail(*v, "must be > 0");
      a.sigma = {x, x};
    }
  }
  return a;
}

// random_rotation: {degrees, interpolation, fill} as torchvision's RandomRotation (expand=False,
// about the centre): degrees (required) a number d >= 0 meaning [-d, d] or [min, max];
// interpolation nearest (default) or bilinear; fill a pixel value 0..255 or [r, g, b] (0).
augment::AugmentStep parse_random_rotation(const Reader& r, const Value& body) {
  const Fields f(r, body, {"degrees", "interpolation", "fill"});
  augment::AugmentStep a;
  a.kind = augment::AugmentStep::Kind::kRotation;
  a.degrees = parse_angle_range(r, f.need("degrees"));
  if (const Value* v = f.get("interpolation")) a.interpolation = parse_interpolation(r, *v);
  if (const Value* v = f.get("fill")) a.fill = parse_fill(r, *v);
  return a;
}

// random_affine: {degrees, translate, scale, shear, interpolation, fill} as torchvision's
// RandomAffine (about the centre): degrees as random_rotation's (required, 0 for none);
// translate [a, b] maximum fractions of width and height within [0, 1]; scale [min, max] with
// 0 < min <= max; shear a number s >= 0 ([-s, s] along x), [min, max] along x, or
// [xmin, xmax, ymin, ymax]; interpolation nearest (default) or bilinear; fill as rotation's.
augment::AugmentStep parse_random_affine(const Reader& r, const Value& body) {
  const Fields f(r, body, {"degrees", "translate", "scale", "shear", "interpolation", "fill"});
  augment::AugmentStep a;
  a.kind = augment::AugmentStep::Kind::kAffine;
  augment::RandomAffineParams& p = a.affine;
  p.degrees = parse_angle_range(r, f.need("degrees"));
  if (const Value* v = f.get("translate")) {
    const auto q = r.numbers(*v, 2);
    for (std::size_t i = 0; i < 2; ++i) {
      if (!(q[i] >= 0 && q[i] <= 1)) r.fail(r.element(*v, i), "must be a fraction of the side within [0, 1]");
    }
    p.has_translate = true;
    p.translate = {q[0], q[1]};
  }
  if (const Value* v = f.get("scale")) {
    const auto q = r.numbers(*v, 2);
    if (!(q[0] > 0 && q[0] <= q[1])) r.fail(*v, "must be [min, max] with 0 < min <= max");
    p.has_scale = true;
    p.scale = {q[0], q[1]};
  }
  if (const Value* v = f.get("shear")) {
    if (v->node.IsSequence() && v->node.size() == 4) {
      const auto q = r.numbers(*v, 4);
      if (!(q[0] <= q[1] && q[2] <= q[3])) r.fail(*v, "must be [xmin, xmax, ymin, ymax] with xmin <= xmax, ymin <= ymax");
      p.shear_ranges = 2;
      p.shear = {q[0], q[1], q[2], q[3]};
    } else if (v->node.IsSequence() && v->node.size() != 2) {
      r.fail(*v, "expected a number s (x shear in [-s, s]), [min, max] (x) or [xmin, xmax, ymin, ymax] (degrees)");
    } else {
      const auto x = parse_angle_range(r, *v);
      p.shear_ranges = 1;
      p.shear = {x[0], x[1], 0, 0};
    }
  }
  if (const Value* v = f.get("interpolation")) a.interpolation = parse_interpolation(r, *v);
  if (const Value* v = f.get("fill")) a.fill = parse_fill(r, *v);
  return a;
}

// trivial_augment_wide: {num_magnitude_bins, interpolation}, rand_augment: {num_ops, magnitude,
// num_magnitude_bins, interpolation}, auto_augment: {policy, interpolation}: torchvision's
// TrivialAugmentWide / RandAugment / AutoAugment with their defaults (31 bins; 2 ops at
// magnitude 9; the imagenet policy; nearest) and fill None (black).
augment::AugmentStep parse_policy(const Reader& r, const Value& body, const std::string& name) {
  augment::AugmentStep a;
  a.kind = augment::AugmentStep::Kind::kPolicy;
  augment::PolicyParams& p = a.policy;
  const bool rand = name == "rand_augment", automatic = name == "auto_augment";
  const Fields f(r, body, rand        ? std::initializer_list<std::string_view>{"num_ops", "magnitude", "num_magnitude_bins", "interpolation"}
                          : automatic ? std::initializer_list<std::string_view>{"policy", "interpolation"}
                                      : std::initializer_list<std::string_view>{"num_magnitude_bins", "interpolation"});
  p.kind = rand ? augment::PolicyKind::kRandAugment
           : automatic ? augment::PolicyKind::kAutoAugmentImagenet
                       : augment::PolicyKind::kTrivialAugmentWide;
  if (automatic) {
    if (const Value* v = f.get("policy")) r.choice(*v, {"imagenet"});  // the one policy Stoker has
  } else {
    // At least 2 bins: torchvision's posterize levels divide by num_bins - 1.
    if (const Value* v = f.get("num_magnitude_bins")) p.num_magnitude_bins = static_cast<int>(r.integer(*v, 2, 1024));
  }
  if (rand) {
    if (const Value* v = f.get("num_ops")) p.num_ops = static_cast<int>(r.integer(*v, 0, augment::kMaxPolicyOps));
    const Value* v = f.get("magnitude");
    if (v != nullptr) p.magnitude = static_cast<int>(r.integer(*v, 0, 1024));
    if (p.magnitude >= p.num_magnitude_bins) {
      r.fail(v != nullptr ? *v : body, "magnitude " + std::to_string(p.magnitude) + " is a bin index: must be below num_magnitude_bins (" +
                                           std::to_string(p.num_magnitude_bins) + ")");
    }
  }
  if (const Value* v = f.get("interpolation")) p.interpolation = parse_interpolation(r, *v);
  return a;
}

// random_erasing: {p, scale, ratio, value} as torchvision's RandomErasing. Before normalize
// it erases uint8 pixels, so a value is an integer 0..255; after normalize it erases the
// float output, so a value is in normalized units and `random` (standard normal values, as
// torchvision) is allowed.
augment::ErasingParams parse_random_erasing(const Reader& r, const Value& body, bool after_normalize) {
  const Fields f(r, body, {"p", "scale", "ratio", "value"});
  augment::ErasingParams e;
  if (const Value* v = f.get("p")) {
    e.p = r.number(*v);
    if (e.p < 0 || e.p > 1) r.fail(*v, "must be within [0, 1]");
  }
  if (const Value* v = f.get("scale")) {
    const auto q = r.numbers(*v, 2);
    if (!(q[0] >= 0 && q[0] <= q[1] && q[1] <= 1)) r.fail(*v, "must be [min, max] with 0 <= min <= max <= 1");
    e.scale = {q[0], q[1]};
  }
  if (const Value* v = f.get("ratio")) {
    const auto q = r.numbers(*v, 2);
    if (!(q[0] > 0 && q[0] <= q[1])) r.fail(*v, "must be [min, max] with 0 < min <= max");
    e.ratio = {q[0], q[1]};
  }
  const Value* v = f.get("value");
  if (v == nullptr) return e;
  if (v->node.IsScalar() && r.text(*v) == "random") {
    if (!after_normalize) {
      r.fail(*v, "'random' draws standard normal values, which mean something only in normalized units: put "
                 "random_erasing after normalize (before it, give pixel values 0..255)");
    }
    e.random = true;
    return e;
  }
  auto one = [&](const Value& x) {
    const double d = r.number(x);
    if (!after_normalize && !(d >= 0 && d <= 255 && d == std::floor(d))) {
      r.fail(x, "before normalize the value is in pixel units: an integer 0..255 (after normalize it is in "
                "normalized units)");
    }
    return static_cast<float>(d);
  };
  if (v->node.IsSequence()) {
    if (v->node.size() == 1) {
      e.value.fill(one(r.element(*v, 0)));
    } else if (v->node.size() == 3) {
      for (std::size_t c = 0; c < 3; ++c) e.value[c] = one(r.element(*v, c));
    } else {
      r.fail(*v, "expected a number, a list of 3 (R, G, B) or 'random'");
    }
  } else {
    e.value.fill(one(*v));
  }
  return e;
}

}  // namespace stoker::config
