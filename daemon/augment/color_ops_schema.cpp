// The schemas of the pointwise colour steps (color_ops.cpp holds their pixels): color_jitter as
// torchvision's ColorJitter; random_grayscale, random_solarize, random_posterize,
// random_autocontrast, random_equalize and random_adjust_sharpness as its Random* transforms,
// with their p defaults (0.1 for grayscale, 0.5 for the others). See op_schema.hpp.
#include <algorithm>
#include <string>

#include "augment/color_ops.hpp"
#include "augment/op_schema.hpp"

namespace stoker::augment {
namespace {

// brightness, contrast, saturation: a number x >= 0 means [max(0, 1 - x), 1 + x]; a pair
// [lo, hi] is used as it is (torchvision's _check_input).
Complaint check_factor(const ParamValue& v, const OpContext&) {
  if (v.list) {
    const bool ok = v.numbers[0] >= 0 && v.numbers[0] <= v.numbers[1];
    return ok ? fine() : complain("must be [min, max] with 0 <= min <= max");
  }
  return v.number() >= 0 ? fine() : complain("must be >= 0");
}
std::array<double, 2> factor_range(const ParamValue& v) {
  if (v.list) return {v.numbers[0], v.numbers[1]};
  return {std::max(0.0, 1 - v.number()), 1 + v.number()};
}

// hue: a number h in [0, 0.5] means [-h, h]; a pair within [-0.5, 0.5] (a full turn is 1).
Complaint check_hue(const ParamValue& v, const OpContext&) {
  if (v.list) {
    const bool ok = -0.5 <= v.numbers[0] && v.numbers[0] <= v.numbers[1] && v.numbers[1] <= 0.5;
    return ok ? fine() : complain("must be [min, max] with -0.5 <= min <= max <= 0.5");
  }
  const double x = v.number();
  return x >= 0 && x <= 0.5 ? fine() : complain("must be within [0, 0.5] (the shift is drawn in [-hue, hue])");
}

constexpr ParamSpec kColorJitter[] = {
    {.name = "brightness", .kind = ParamKind::kNumberOrPair, .check = check_factor,
     .apply = [](AugmentStep& a, const ParamValue& v) { a.brightness = factor_range(v); }},
    {.name = "contrast", .kind = ParamKind::kNumberOrPair, .check = check_factor,
     .apply = [](AugmentStep& a, const ParamValue& v) { a.contrast = factor_range(v); }},
    {.name = "saturation", .kind = ParamKind::kNumberOrPair, .check = check_factor,
     .apply = [](AugmentStep& a, const ParamValue& v) { a.saturation = factor_range(v); }},
    {.name = "hue", .kind = ParamKind::kNumberOrPair, .check = check_hue,
     .apply = [](AugmentStep& a, const ParamValue& v) {
       a.hue = v.list ? std::array<double, 2>{v.numbers[0], v.numbers[1]}
                      : std::array<double, 2>{-v.number(), v.number()};
     }},
};

constexpr ParamSpec kP = {.name = "p", .kind = ParamKind::kNumber, .check = check_probability,
                          .apply = [](AugmentStep& a, const ParamValue& v) { a.p = v.number(); }};

constexpr ParamSpec kJustP[] = {kP};
constexpr ParamSpec kSolarize[] = {
    {.name = "threshold", .kind = ParamKind::kInteger, .required = true, .min = 0, .max = 256,
     .apply = [](AugmentStep& a, const ParamValue& v) { a.threshold = static_cast<int>(v.number()); }},
    kP,
};
constexpr ParamSpec kPosterize[] = {
    {.name = "bits", .kind = ParamKind::kInteger, .required = true, .min = 0, .max = 8,
     .apply = [](AugmentStep& a, const ParamValue& v) { a.bits = static_cast<int>(v.number()); }},
    kP,
};
constexpr ParamSpec kSharpness[] = {
    {.name = "sharpness_factor", .kind = ParamKind::kNumber, .required = true,
     .check = [](const ParamValue& v, const OpContext&) { return v.number() >= 0 ? fine() : complain("must be >= 0"); },
     .apply = [](AugmentStep& a, const ParamValue& v) { a.sharpness = v.number(); }},
    kP,
};

template <AugmentStep::Kind K, int PercentP>
AugmentStep make_color_step() {
  AugmentStep a;
  a.kind = K;
  a.p = PercentP / 100.0;  // torchvision's default (color_jitter ignores p)
  return a;
}

constexpr std::string_view kNeedsGeometry = "colour steps come after the geometry step";
constexpr std::string_view kBeforeNormalize = "colour steps work on uint8 pixels: put them before normalize";

using K = AugmentStep::Kind;
const OpSchema kColorSchemas[] = {
    {.name = "color_jitter", .params = kColorJitter, .make = make_color_step<K::kColorJitter, 100>,
     .needs_geometry = kNeedsGeometry, .before_normalize = kBeforeNormalize},
    {.name = "random_grayscale", .params = kJustP, .make = make_color_step<K::kGrayscale, 10>,
     .needs_geometry = kNeedsGeometry, .before_normalize = kBeforeNormalize},
    {.name = "random_solarize", .params = kSolarize, .make = make_color_step<K::kSolarize, 50>,
     .needs_geometry = kNeedsGeometry, .before_normalize = kBeforeNormalize},
    {.name = "random_posterize", .params = kPosterize, .make = make_color_step<K::kPosterize, 50>,
     .needs_geometry = kNeedsGeometry, .before_normalize = kBeforeNormalize},
    {.name = "random_autocontrast", .params = kJustP, .make = make_color_step<K::kAutocontrast, 50>,
     .needs_geometry = kNeedsGeometry, .before_normalize = kBeforeNormalize},
    {.name = "random_equalize", .params = kJustP, .make = make_color_step<K::kEqualize, 50>,
     .needs_geometry = kNeedsGeometry, .before_normalize = kBeforeNormalize},
    {.name = "random_adjust_sharpness", .params = kSharpness, .make = make_color_step<K::kSharpness, 50>,
     .needs_geometry = kNeedsGeometry, .before_normalize = kBeforeNormalize},
};

}  // namespace

std::span<const OpSchema> color_op_schemas() { return kColorSchemas; }

}  // namespace stoker::augment
