// The schema of random_erasing (erasing.cpp holds its drawing and pixels): {p, scale, ratio,
// value} as torchvision's RandomErasing. Before normalize it erases uint8 pixels, so a value
// is an integer 0..255; after normalize it erases the float output, so a value is in
// normalized units and `random` (standard normal values, as torchvision) is allowed. See
// op_schema.hpp.
#include <cmath>

#include "augment/color_ops.hpp"
#include "augment/op_schema.hpp"

namespace stoker::augment {
namespace {

constexpr std::size_t kOneOrThree[] = {1, 3};

constexpr ParamSpec kErasingParams[] = {
    {.name = "p", .kind = ParamKind::kNumber, .check = check_probability,
     .apply = [](AugmentStep& a, const ParamValue& v) { a.erasing.p = v.number(); }},
    {.name = "scale", .kind = ParamKind::kPair,
     .check = [](const ParamValue& v, const OpContext&) {
       const auto& q = v.numbers;
       const bool ok = q[0] >= 0 && q[0] <= q[1] && q[1] <= 1;
       return ok ? fine() : complain("must be [min, max] with 0 <= min <= max <= 1");
     },
     .apply = [](AugmentStep& a, const ParamValue& v) { a.erasing.scale = {v.numbers[0], v.numbers[1]}; }},
    {.name = "ratio", .kind = ParamKind::kPair, .check = check_positive_range,
     .apply = [](AugmentStep& a, const ParamValue& v) { a.erasing.ratio = {v.numbers[0], v.numbers[1]}; }},
    {.name = "value", .kind = ParamKind::kNumberOrList, .lengths = kOneOrThree,
     .list_error = "expected a number, a list of 3 (R, G, B) or 'random'", .word = "random",
     .check_element = [](double d, const OpContext& ctx) {
       if (ctx.after_normalize || (d >= 0 && d <= 255 && d == std::floor(d))) return fine();
       return complain("before normalize the value is in pixel units: an integer 0..255 (after normalize it is in "
                       "normalized units)");
     },
     .check = [](const ParamValue& v, const OpContext& ctx) {
       if (v.word.empty() || ctx.after_normalize) return fine();
       return complain("'random' draws standard normal values, which mean something only in normalized units: put "
                       "random_erasing after normalize (before it, give pixel values 0..255)");
     },
     .apply = [](AugmentStep& a, const ParamValue& v) {
       ErasingParams& e = a.erasing;
       if (!v.word.empty()) {
         e.random = true;
       } else if (v.numbers.size() == 3) {
         for (std::size_t c = 0; c < 3; ++c) e.value[c] = static_cast<float>(v.numbers[c]);
       } else {
         e.value.fill(static_cast<float>(v.number()));
       }
     }},
};

AugmentStep make_erasing_step() {
  AugmentStep a;
  a.kind = AugmentStep::Kind::kErasing;
  return a;
}

const OpSchema kErasingSchemas[] = {
    {.name = "random_erasing", .params = kErasingParams, .make = make_erasing_step,
     .needs_geometry = "random_erasing comes after the geometry step", .runs_after_normalize = true,
     .flip_first = true},
};

}  // namespace

std::span<const OpSchema> erasing_op_schemas() { return kErasingSchemas; }

}  // namespace stoker::augment
