#include "augment/policies.hpp"

#include <cmath>

#include "augment/linspace.hpp"

namespace stoker::augment {
namespace {

using enum PolicyOp;

// TrivialAugmentWide._augmentation_space and RandAugment._augmentation_space list the same 14
// ops in the same order (Identity first), which fixes what a uniform op index means.
constexpr std::array<PolicyOp, 14> kWideOps = {kIdentity, kShearX, kShearY, kTranslateX, kTranslateY,
                                               kRotate, kBrightness, kColor, kContrast, kSharpness,
                                               kPosterize, kSolarize, kAutoContrast, kEqualize};

// AutoAugmentPolicy.IMAGENET, as AutoAugment._get_policies lists it (-1: no magnitude).
constexpr std::array<std::array<SubPolicyOp, 2>, 25> kImagenet = {{
    {{{kPosterize, 0.4, 8}, {kRotate, 0.6, 9}}},
    {{{kSolarize, 0.6, 5}, {kAutoContrast, 0.6, -1}}},
    {{{kEqualize, 0.8, -1}, {kEqualize, 0.6, -1}}},
    {{{kPosterize, 0.6, 7}, {kPosterize, 0.6, 6}}},
    {{{kEqualize, 0.4, -1}, {kSolarize, 0.2, 4}}},
    {{{kEqualize, 0.4, -1}, {kRotate, 0.8, 8}}},
    {{{kSolarize, 0.6, 3}, {kEqualize, 0.6, -1}}},
    {{{kPosterize, 0.8, 5}, {kEqualize, 1.0, -1}}},
    {{{kRotate, 0.2, 3}, {kSolarize, 0.6, 8}}},
    {{{kEqualize, 0.6, -1}, {kPosterize, 0.4, 6}}},
    {{{kRotate, 0.8, 8}, {kColor, 0.4, 0}}},
    {{{kRotate, 0.4, 9}, {kEqualize, 0.6, -1}}},
    {{{kEqualize, 0.0, -1}, {kEqualize, 0.8, -1}}},
    {{{kInvert, 0.6, -1}, {kEqualize, 1.0, -1}}},
    {{{kColor, 0.6, 4}, {kContrast, 1.0, 8}}},
    {{{kRotate, 0.8, 8}, {kColor, 1.0, 2}}},
    {{{kColor, 0.8, 8}, {kSolarize, 0.8, 7}}},
    {{{kSharpness, 0.4, 7}, {kInvert, 0.6, -1}}},
    {{{kShearX, 0.6, 5}, {kEqualize, 1.0, -1}}},
    {{{kColor, 0.4, 0}, {kEqualize, 0.6, -1}}},
    {{{kEqualize, 0.4, -1}, {kSolarize, 0.2, 4}}},
    {{{kSolarize, 0.6, 5}, {kAutoContrast, 0.6, -1}}},
    {{{kInvert, 0.6, -1}, {kEqualize, 1.0, -1}}},
    {{{kColor, 0.6, 4}, {kContrast, 1.0, 8}}},
    {{{kEqualize, 0.8, -1}, {kEqualize, 0.6, -1}}},
}};

// 8 - (torch.arange(n) / ((n - 1) / levels)).round().int(): ATen divides by a CPU scalar as a
// multiplication by its reciprocal in double, the quotient is float32, rounded half to even.
int posterize_bits(int bin, int num_bins, int levels) {
  const double divisor = static_cast<double>(num_bins - 1) / levels;
  const auto q = static_cast<float>(static_cast<double>(bin) * (1.0 / divisor));
  return 8 - static_cast<int>(std::nearbyint(q));
}

}  // namespace

const char* to_string(PolicyOp op) {
  switch (op) {
    case kIdentity: return "Identity";
    case kShearX: return "ShearX";
    case kShearY: return "ShearY";
    case kTranslateX: return "TranslateX";
    case kTranslateY: return "TranslateY";
    case kRotate: return "Rotate";
    case kBrightness: return "Brightness";
    case kColor: return "Color";
    case kContrast: return "Contrast";
    case kSharpness: return "Sharpness";
    case kPosterize: return "Posterize";
    case kSolarize: return "Solarize";
    case kAutoContrast: return "AutoContrast";
    case kEqualize: return "Equalize";
    case kInvert: return "Invert";
  }
  return "?";
}

std::span<const PolicyOp> policy_ops(PolicyKind kind) {
  if (kind == PolicyKind::kAutoAugmentImagenet) return {};
  return kWideOps;
}

std::span<const std::array<SubPolicyOp, 2>> auto_augment_imagenet() { return kImagenet; }

bool is_signed(PolicyOp op) {
  switch (op) {
    case kShearX: case kShearY: case kTranslateX: case kTranslateY: case kRotate:
    case kBrightness: case kColor: case kContrast: case kSharpness:
      return true;
    default:
      return false;
  }
}

bool has_magnitude(PolicyOp op) { return is_signed(op) || op == kPosterize || op == kSolarize; }

double magnitude_value(PolicyKind kind, PolicyOp op, int bin, int num_bins, int height, int width) {
  const bool wide = kind == PolicyKind::kTrivialAugmentWide;
  auto lin = [&](double end) { return static_cast<double>(linspace_at(0.0f, static_cast<float>(end), num_bins, bin)); };
  switch (op) {
    case kShearX: case kShearY: return lin(wide ? 0.99 : 0.3);
    case kTranslateX: return lin(wide ? 32.0 : 150.0 / 331.0 * width);
    case kTranslateY: return lin(wide ? 32.0 : 150.0 / 331.0 * height);
    case kRotate: return lin(wide ? 135.0 : 30.0);
    case kBrightness: case kColor: case kContrast: case kSharpness: return lin(wide ? 0.99 : 0.9);
    case kPosterize: return posterize_bits(bin, num_bins, wide ? 6 : 4);
    case kSolarize: return static_cast<double>(linspace_at(255.0f, 0.0f, num_bins, bin));
    default: return 0.0;
  }
}

PolicyDraws draw_policy(const PolicyParams& p, int height, int width, CounterRng& rng) {
  PolicyDraws d;
  auto finish = [&](PolicyDraw& o, int num_bins) {
    if (o.bin >= 0) o.magnitude = magnitude_value(p.kind, o.op, o.bin, num_bins, height, width);
    if (o.negative) o.magnitude = -o.magnitude;
  };
  switch (p.kind) {
    case PolicyKind::kTrivialAugmentWide: {
      // forward(): an op index, a bin (ops with a table), a sign (signed ops), in that order.
      PolicyDraw& o = d.ops[d.count++];
      o.op = kWideOps[rng.below(kWideOps.size())];
      if (has_magnitude(o.op)) o.bin = static_cast<int>(rng.below(static_cast<std::uint64_t>(p.num_magnitude_bins)));
      if (is_signed(o.op)) o.negative = rng.below(2) == 1;
      finish(o, p.num_magnitude_bins);
      break;
    }
    case PolicyKind::kRandAugment:
      // num_ops times: an op index, then a sign for signed ops; the bin is `magnitude`.
      for (int i = 0; i < p.num_ops && i < kMaxPolicyOps; ++i) {
        PolicyDraw& o = d.ops[d.count++];
        o.op = kWideOps[rng.below(kWideOps.size())];
        if (has_magnitude(o.op)) o.bin = p.magnitude;
        if (is_signed(o.op)) o.negative = rng.below(2) == 1;
        finish(o, p.num_magnitude_bins);
      }
      break;
    case PolicyKind::kAutoAugmentImagenet: {
      // get_params: a sub-policy, two probabilities, two signs (drawn whatever the ops); op i
      // runs when probs[i] <= p, negated when its sign is 0.
      const auto& sub = kImagenet[rng.below(kImagenet.size())];
      const double probs[2] = {rng.uniform(), rng.uniform()};
      const bool sign_zero[2] = {rng.below(2) == 0, rng.below(2) == 0};
      for (int i = 0; i < 2; ++i) {
        if (!(probs[i] <= sub[i].p)) continue;
        PolicyDraw& o = d.ops[d.count++];
        o.op = sub[i].op;
        o.bin = sub[i].bin;
        o.negative = is_signed(o.op) && sign_zero[i];
        finish(o, 10);
      }
      break;
    }
  }
  return d;
}

}  // namespace stoker::augment
