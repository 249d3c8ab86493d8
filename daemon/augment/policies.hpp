// The automatic augmentation policies of torchvision 0.14 (autoaugment.py): TrivialAugmentWide,
// RandAugment and AutoAugment (ImageNet policy). This file holds what decides *which* op runs
// with *which* magnitude — the op lists in torchvision's order, the magnitude tables as
// torch builds them (float32 linspace, posterize's rounded levels) and the per-sample draws —
// as pure functions, so tests/unit/augment_test.cpp can count frequencies and the fidelity
// probe can print the tables. Running an op is augment/color_ops.cpp's apply_policy_op
// (_apply_op's semantics: shear as degrees(atan(m)) about the top-left corner, translate in
// whole pixels, no fill, i.e. black).
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "augment/geometric.hpp"
#include "core/rng.hpp"

namespace stoker::augment {

enum class PolicyOp : std::uint8_t {
  kIdentity, kShearX, kShearY, kTranslateX, kTranslateY, kRotate, kBrightness, kColor, kContrast,
  kSharpness, kPosterize, kSolarize, kAutoContrast, kEqualize, kInvert,
};
const char* to_string(PolicyOp op);  // torchvision's name ("ShearX", ...)

enum class PolicyKind : std::uint8_t { kTrivialAugmentWide, kRandAugment, kAutoAugmentImagenet };

// Most ops one sample can get: rand_augment's num_ops is capped at this by the config.
inline constexpr int kMaxPolicyOps = 16;

struct PolicyParams {
  PolicyKind kind = PolicyKind::kTrivialAugmentWide;
  int num_magnitude_bins = 31;  // trivial_augment_wide, rand_augment (>= 2)
  int num_ops = 2;              // rand_augment, 0..kMaxPolicyOps
  int magnitude = 9;            // rand_augment: the bin used, 0 <= magnitude < num_magnitude_bins
  Interpolation interpolation = Interpolation::kNearest;
};

struct PolicyDraw {
  PolicyOp op = PolicyOp::kIdentity;
  int bin = -1;           // the magnitude bin, -1 for ops without a magnitude table
  bool negative = false;  // a signed op's sign flip
  double magnitude = 0;   // what _apply_op receives: the table's float32 value, signed
};

struct PolicyDraws {
  std::array<PolicyDraw, kMaxPolicyOps> ops;
  int count = 0;
};

// The ops a policy picks from, in torchvision's dict order (TrivialAugmentWide and
// RandAugment: 14, Identity first; AutoAugment uses its sub-policy table instead).
std::span<const PolicyOp> policy_ops(PolicyKind kind);

// The 25 (op, probability, magnitude bin or -1) pairs of AutoAugmentPolicy.IMAGENET.
struct SubPolicyOp {
  PolicyOp op;
  double p;
  int bin;
};
std::span<const std::array<SubPolicyOp, 2>> auto_augment_imagenet();

// True for the ops whose magnitude flips sign with probability 0.5.
bool is_signed(PolicyOp op);
// True for the ops with a magnitude table (the others get magnitude 0).
bool has_magnitude(PolicyOp op);

// _augmentation_space(num_bins, (height, width))[op][bin] as a double of torch's value
// (AutoAugment uses num_bins 10). `bin` within [0, num_bins).
double magnitude_value(PolicyKind kind, PolicyOp op, int bin, int num_bins, int height, int width);

// One sample's forward(): which ops, bins and signs (the image size enters RandAugment's and
// AutoAugment's translate tables).
PolicyDraws draw_policy(const PolicyParams& p, int height, int width, CounterRng& rng);

}  // namespace stoker::augment
