// The schemas of random_rotation and random_affine (geometric.cpp holds their drawing and
// pixels), as torchvision's RandomRotation (expand=False, about the centre) and RandomAffine:
// degrees (required; a number d >= 0 meaning [-d, d], or [min, max]; 0 for none); affine's
// translate [a, b], maximum fractions of width and height within [0, 1]; scale [min, max] with
// 0 < min <= max; shear a number s >= 0 ([-s, s] along x), [min, max] along x, or
// [xmin, xmax, ymin, ymax]; interpolation nearest (default) or bilinear; fill a pixel value
// 0..255 or [r, g, b] (default 0). See op_schema.hpp.
#include "augment/color_ops.hpp"
#include "augment/op_schema.hpp"

namespace stoker::augment {
namespace {

constexpr std::size_t kThree[] = {3};
constexpr std::size_t kTwoOrFour[] = {2, 4};

// fill: a pixel value 0..255 or [r, g, b].
constexpr ParamSpec kFill = {
    .name = "fill", .kind = ParamKind::kNumberOrList, .lengths = kThree,
    .list_error = "expected a number or a list of 3 (R, G, B)",
    .check_element = [](double p, const OpContext&) {
      return p >= 0 && p <= 255 ? fine() : complain("must be a pixel value within [0, 255]");
    },
    .apply = [](AugmentStep& a, const ParamValue& v) {
      if (v.list) {
        for (std::size_t c = 0; c < 3; ++c) a.fill[c] = static_cast<float>(v.numbers[c]);
      } else {
        a.fill.fill(static_cast<float>(v.number()));
      }
    }};

constexpr ParamSpec kInterpolation = {
    .name = "interpolation", .kind = ParamKind::kChoice, .choices = kInterpolationNames,
    .apply = [](AugmentStep& a, const ParamValue& v) { a.interpolation = interpolation_of(v); }};

constexpr ParamSpec kRotation[] = {
    {.name = "degrees", .kind = ParamKind::kNumberOrPair, .required = true, .check = check_angle_range,
     .apply = [](AugmentStep& a, const ParamValue& v) { a.degrees = angle_range(v); }},
    kInterpolation,
    kFill,
};

constexpr ParamSpec kAffine[] = {
    {.name = "degrees", .kind = ParamKind::kNumberOrPair, .required = true, .check = check_angle_range,
     .apply = [](AugmentStep& a, const ParamValue& v) { a.affine.degrees = angle_range(v); }},
    {.name = "translate", .kind = ParamKind::kPair,
     .check = [](const ParamValue& v, const OpContext&) {
       for (int i = 0; i < 2; ++i) {
         if (!(v.numbers[i] >= 0 && v.numbers[i] <= 1)) {
           return complain("must be a fraction of the side within [0, 1]", i);
         }
       }
       return fine();
     },
     .apply = [](AugmentStep& a, const ParamValue& v) {
       a.affine.has_translate = true;
       a.affine.translate = {v.numbers[0], v.numbers[1]};
     }},
    {.name = "scale", .kind = ParamKind::kPair, .check = check_positive_range,
     .apply = [](AugmentStep& a, const ParamValue& v) {
       a.affine.has_scale = true;
       a.affine.scale = {v.numbers[0], v.numbers[1]};
     }},
    {.name = "shear", .kind = ParamKind::kNumberOrList, .lengths = kTwoOrFour,
     .list_error = "expected a number s (x shear in [-s, s]), [min, max] (x) or [xmin, xmax, ymin, ymax] (degrees)",
     .check = [](const ParamValue& v, const OpContext& ctx) {
       if (v.numbers.size() != 4) return check_angle_range(v, ctx);
       const auto& q = v.numbers;
       return q[0] <= q[1] && q[2] <= q[3]
                  ? fine()
                  : complain("must be [xmin, xmax, ymin, ymax] with xmin <= xmax, ymin <= ymax");
     },
     .apply = [](AugmentStep& a, const ParamValue& v) {
       if (v.numbers.size() == 4) {
         a.affine.shear_ranges = 2;
         a.affine.shear = {v.numbers[0], v.numbers[1], v.numbers[2], v.numbers[3]};
       } else {
         const auto x = angle_range(v);
         a.affine.shear_ranges = 1;
         a.affine.shear = {x[0], x[1], 0, 0};
       }
     }},
    kInterpolation,
    kFill,
};

template <AugmentStep::Kind K>
AugmentStep make_geometric_step() {
  AugmentStep a;
  a.kind = K;
  return a;
}

const OpSchema kGeometricSchemas[] = {
    {.name = "random_rotation", .params = kRotation, .make = make_geometric_step<AugmentStep::Kind::kRotation>,
     .needs_geometry = "random_rotation comes after the geometry step",
     .before_normalize = "random_rotation works on uint8 pixels: put it before normalize", .flip_first = true},
    {.name = "random_affine", .params = kAffine, .make = make_geometric_step<AugmentStep::Kind::kAffine>,
     .needs_geometry = "random_affine comes after the geometry step (random_resized_crop or resize)",
     .before_normalize = "random_affine works on uint8 pixels: put it before normalize", .flip_first = true},
};

}  // namespace

std::span<const OpSchema> geometric_op_schemas() { return kGeometricSchemas; }

}  // namespace stoker::augment
