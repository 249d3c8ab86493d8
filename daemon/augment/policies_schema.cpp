// The schemas of the automatic policies (policies.cpp holds their drawing, color_ops.cpp's
// apply_policy_op their pixels): trivial_augment_wide {num_magnitude_bins, interpolation},
// rand_augment {num_ops, magnitude, num_magnitude_bins, interpolation}, auto_augment {policy,
// interpolation}, as torchvision's TrivialAugmentWide / RandAugment / AutoAugment with their
// defaults (31 bins; 2 ops at magnitude 9; the imagenet policy; nearest) and fill None
// (black). See op_schema.hpp.
#include <string>

#include "augment/color_ops.hpp"
#include "augment/op_schema.hpp"

namespace stoker::augment {
namespace {

// At least 2 bins: torchvision's posterize levels divide by num_bins - 1.
constexpr ParamSpec kBins = {
    .name = "num_magnitude_bins", .kind = ParamKind::kInteger, .min = 2, .max = 1024,
    .apply = [](AugmentStep& a, const ParamValue& v) { a.policy.num_magnitude_bins = static_cast<int>(v.number()); }};
constexpr ParamSpec kInterpolation = {
    .name = "interpolation", .kind = ParamKind::kChoice, .choices = kInterpolationNames,
    .apply = [](AugmentStep& a, const ParamValue& v) { a.policy.interpolation = interpolation_of(v); }};
constexpr std::string_view kPolicies[] = {"imagenet"};  // the one AutoAugment policy Stoker has

constexpr ParamSpec kTrivial[] = {kBins, kInterpolation};
constexpr ParamSpec kRand[] = {
    {.name = "num_ops", .kind = ParamKind::kInteger, .min = 0, .max = kMaxPolicyOps,
     .apply = [](AugmentStep& a, const ParamValue& v) { a.policy.num_ops = static_cast<int>(v.number()); }},
    {.name = "magnitude", .kind = ParamKind::kInteger, .min = 0, .max = 1024,
     .apply = [](AugmentStep& a, const ParamValue& v) { a.policy.magnitude = static_cast<int>(v.number()); }},
    kBins,
    kInterpolation,
};
constexpr ParamSpec kAuto[] = {
    {.name = "policy", .kind = ParamKind::kChoice, .choices = kPolicies,
     .apply = [](AugmentStep&, const ParamValue&) {}},  // imagenet, set by make
    kInterpolation,
};

template <PolicyKind P>
AugmentStep make_policy_step() {
  AugmentStep a;
  a.kind = AugmentStep::Kind::kPolicy;
  a.policy.kind = P;
  return a;
}

// magnitude is a bin index (the default 9 too, against a num_magnitude_bins written lower).
StepComplaint finish_rand(const AugmentStep& a) {
  const PolicyParams& p = a.policy;
  if (p.magnitude < p.num_magnitude_bins) return {};
  return {"magnitude", "magnitude " + std::to_string(p.magnitude) +
                           " is a bin index: must be below num_magnitude_bins (" +
                           std::to_string(p.num_magnitude_bins) + ")"};
}

const OpSchema kPolicySchemas[] = {
    {.name = "trivial_augment_wide", .params = kTrivial, .make = make_policy_step<PolicyKind::kTrivialAugmentWide>,
     .needs_geometry = "trivial_augment_wide comes after the geometry step (random_resized_crop or resize)",
     .before_normalize = "trivial_augment_wide works on uint8 pixels: put it before normalize", .flip_first = true},
    {.name = "rand_augment", .params = kRand, .make = make_policy_step<PolicyKind::kRandAugment>, .finish = finish_rand,
     .needs_geometry = "rand_augment comes after the geometry step (random_resized_crop or resize)",
     .before_normalize = "rand_augment works on uint8 pixels: put it before normalize", .flip_first = true},
    {.name = "auto_augment", .params = kAuto, .make = make_policy_step<PolicyKind::kAutoAugmentImagenet>,
     .needs_geometry = "auto_augment comes after the geometry step (random_resized_crop or resize)",
     .before_normalize = "auto_augment works on uint8 pixels: put it before normalize", .flip_first = true},
};

}  // namespace

std::span<const OpSchema> policy_op_schemas() { return kPolicySchemas; }

}  // namespace stoker::augment
