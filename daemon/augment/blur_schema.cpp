// The schema of gaussian_blur (blur.cpp holds its pixels): {kernel_size, sigma} as
// torchvision's GaussianBlur. kernel_size (required) an odd positive int or [kx, ky]
// (torchvision's order: x is across, y down); sigma a number > 0 or [min, max] with
// 0 < min <= max, default [0.1, 2.0]. Reflect padding needs kernel/2 pixels to mirror on each
// side, so the kernel must fit the output (torch raises otherwise). See op_schema.hpp.
#include <string>

#include "augment/color_ops.hpp"
#include "augment/op_schema.hpp"

namespace stoker::augment {
namespace {

std::array<int, 2> kernel_of(const ParamValue& v) {
  const auto kx = static_cast<int>(v.numbers[0]);
  return {kx, v.list ? static_cast<int>(v.numbers[1]) : kx};
}

Complaint check_kernel(const ParamValue& v, const OpContext& ctx) {
  // (With `resize: {size: N}` still waiting for its center_crop the size is not known yet;
  // the missing center_crop is refused at the end of the pipeline.)
  const auto [kx, ky] = kernel_of(v);
  if (!ctx.size_known || (kx / 2 < ctx.out_width && ky / 2 < ctx.out_height)) return fine();
  return complain("a " + std::to_string(kx) + "x" + std::to_string(ky) + " kernel needs an output of at least " +
                  std::to_string(kx / 2 + 1) + "x" + std::to_string(ky / 2 + 1) +
                  " (width x height) to reflect into, this one is " + std::to_string(ctx.out_width) + "x" +
                  std::to_string(ctx.out_height));
}

constexpr std::size_t kTwo[] = {2};

constexpr ParamSpec kBlurParams[] = {
    {.name = "kernel_size", .kind = ParamKind::kNumberOrList, .required = true, .min = 1, .max = kMaxImageSide,
     .lengths = kTwo, .list_error = "expected an odd integer or a list [kx, ky] of two", .integers = true,
     .check_element = [](double x, const OpContext&) {
       const auto n = static_cast<int>(x);
       if (n % 2 != 0) return fine();
       return complain("must be odd (the kernel is centred on the pixel), got " + std::to_string(n));
     },
     .check = check_kernel,
     .apply = [](AugmentStep& a, const ParamValue& v) { a.kernel = kernel_of(v); }},
    {.name = "sigma", .kind = ParamKind::kNumberOrPair, .check = check_positive_range,
     .apply = [](AugmentStep& a, const ParamValue& v) {
       a.sigma = v.list ? std::array<double, 2>{v.numbers[0], v.numbers[1]}
                        : std::array<double, 2>{v.number(), v.number()};
     }},
};

AugmentStep make_blur_step() {
  AugmentStep a;
  a.kind = AugmentStep::Kind::kGaussianBlur;
  return a;
}

const OpSchema kBlurSchemas[] = {
    {.name = "gaussian_blur", .params = kBlurParams, .make = make_blur_step,
     .needs_geometry = "gaussian_blur comes after the geometry step",
     .before_normalize = "gaussian_blur works on uint8 pixels: put it before normalize"},
};

}  // namespace

std::span<const OpSchema> blur_op_schemas() { return kBlurSchemas; }

}  // namespace stoker::augment
