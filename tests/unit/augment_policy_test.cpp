// Unit tier (#17): random_affine's warp and draws, and the automatic policies' draws
// (daemon/augment/policies.hpp). The policies must pick ops, magnitude bins and signs with
// torchvision's frequencies (autoaugment.py 0.14): chi-square tests over many samples of the
// draw function itself, with a fixed seed (so the test is deterministic), at the 0.1% level.
// Pixel agreement with torchvision is tests/fidelity/augment_fidelity.py's job.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <vector>

#include "augment/geometric.hpp"
#include "augment/policies.hpp"
#include "core/rng.hpp"
#include "augment/color_ops.hpp"

using namespace stoker;
using augment::Interpolation;
using augment::PolicyKind;
using augment::PolicyOp;

namespace {

std::vector<std::uint8_t> policy_card(int w = 32, int h = 24) {
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      std::uint8_t* p = &rgb[(static_cast<std::size_t>(y) * w + x) * 3];
      p[0] = static_cast<std::uint8_t>(1 + x * 254 / (w - 1));
      p[1] = static_cast<std::uint8_t>(1 + y * 254 / (h - 1));
      p[2] = static_cast<std::uint8_t>(1 + (x * 7 + y * 13) % 250);
    }
  }
  return rgb;
}

// Pearson's statistic of observed counts against expected ones (cells expected 0 must be 0).
double chi_square(const std::vector<double>& observed, const std::vector<double>& expected, int& df) {
  double x = 0;
  df = -1;
  for (std::size_t i = 0; i < observed.size(); ++i) {
    if (expected[i] == 0) {
      REQUIRE(observed[i] == 0);
      continue;
    }
    x += (observed[i] - expected[i]) * (observed[i] - expected[i]) / expected[i];
    ++df;
  }
  return x;
}

// The chi-square quantile at 99.9% (Wilson-Hilferty; within 1% for df >= 1 at this level).
double critical(int df) {
  const double k = df, z = 3.0902;
  return k * std::pow(1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k)), 3);
}

std::size_t op_index(PolicyOp op) { return static_cast<std::size_t>(op); }

}  // namespace

TEST_CASE("affine: identity, integer translation moves pixels, rotate is affine of -angle", "[augment]") {
  std::vector<std::uint8_t> scratch;
  const std::array<float, 3> black{0, 0, 0};
  for (auto mode : {Interpolation::kNearest, Interpolation::kBilinear}) {
    auto rgb = policy_card();
    augment::affine(rgb.data(), 32, 24, {}, mode, &black, scratch);
    CHECK(rgb == policy_card());
    augment::AffineParams t;
    t.translate = {3, -2};
    augment::affine(rgb.data(), 32, 24, t, mode, nullptr, scratch);
    const auto c = policy_card();
    int off = 0;
    for (int y = 0; y < 24; ++y) {
      for (int x = 0; x < 32; ++x) {
        const bool inside = x - 3 >= 0 && y + 2 < 24;
        for (int k = 0; k < 3; ++k) {
          const std::uint8_t want = inside ? c[((y + 2) * 32 + (x - 3)) * 3 + k] : 0;  // fill None: black
          off += rgb[(y * 32 + x) * 3 + k] != want;
        }
      }
    }
    CHECK(off == 0);
  }
  auto a = policy_card(), b = policy_card();
  augment::AffineParams r;
  r.angle = -33;
  augment::affine(a.data(), 32, 24, r, Interpolation::kBilinear, &black, scratch);
  augment::rotate(b.data(), 32, 24, 33, Interpolation::kBilinear, black, scratch);
  CHECK(a == b);
}

TEST_CASE("affine: a fill blends at the border, no fill leaves black, scale 0.5 shrinks towards the centre",
          "[augment]") {
  std::vector<std::uint8_t> scratch;
  const std::array<float, 3> grey{128, 128, 128};
  std::vector<std::uint8_t> flat(16 * 16 * 3, 200);
  augment::AffineParams s;
  s.scale = 0.5;
  auto a = flat;
  augment::affine(a.data(), 16, 16, s, Interpolation::kNearest, &grey, scratch);
  CHECK(a[0] == 128);                       // corner from outside: the fill
  CHECK(a[(8 * 16 + 8) * 3] == 200);        // centre from inside
  auto b = flat;
  augment::affine(b.data(), 16, 16, s, Interpolation::kNearest, nullptr, scratch);
  CHECK(b[0] == 0);
  CHECK(b[(8 * 16 + 8) * 3] == 200);
}

TEST_CASE("random_affine draws: in range, whole-pixel translations, only what is configured", "[augment]") {
  augment::RandomAffineParams p;
  p.degrees = {-10, 20};
  p.has_translate = true;
  p.translate = {0.25, 0.5};
  p.has_scale = true;
  p.scale = {0.8, 1.2};
  p.shear_ranges = 2;
  p.shear = {-5, 5, 1, 2};
  for (std::uint64_t id = 0; id < 500; ++id) {
    CounterRng rng(1, 0, id, kStreamColor);
    const auto a = augment::draw_random_affine(p, 40, 30, rng);
    REQUIRE((a.angle >= -10 && a.angle < 20));
    REQUIRE((std::abs(a.translate[0]) <= 10 && a.translate[0] == std::round(a.translate[0])));
    REQUIRE((std::abs(a.translate[1]) <= 15 && a.translate[1] == std::round(a.translate[1])));
    REQUIRE((a.scale >= 0.8 && a.scale < 1.2));
    REQUIRE((a.shear[0] >= -5 && a.shear[0] < 5 && a.shear[1] >= 1 && a.shear[1] < 2));
    REQUIRE((a.center == std::array<double, 2>{0, 0}));
  }
  augment::RandomAffineParams only_angle;
  only_angle.degrees = {5, 5};
  CounterRng rng(1, 0, 0, kStreamColor);
  const auto a = augment::draw_random_affine(only_angle, 40, 30, rng);
  CHECK((a.angle == 5 && a.scale == 1 && a.translate == std::array<double, 2>{0, 0} && a.shear == std::array<double, 2>{0, 0}));
}

TEST_CASE("trivial_augment_wide: ops, magnitude bins and signs with torchvision's frequencies (chi-square)",
          "[augment][policy]") {
  augment::PolicyParams p;  // TrivialAugmentWide, 31 bins
  const int n = 28000;
  std::vector<double> ops(15, 0), bins(31, 0), signs(2, 0);
  for (int id = 0; id < n; ++id) {
    CounterRng rng(11, 3, static_cast<std::uint64_t>(id), kStreamColor);
    const auto d = augment::draw_policy(p, 224, 224, rng);
    REQUIRE(d.count == 1);
    const auto& o = d.ops[0];
    ops[op_index(o.op)] += 1;
    REQUIRE(o.bin == (augment::has_magnitude(o.op) ? o.bin : -1));
    if (o.bin >= 0) {
      REQUIRE(o.bin < 31);
      bins[static_cast<std::size_t>(o.bin)] += 1;
      REQUIRE(std::abs(o.magnitude) ==
              augment::magnitude_value(PolicyKind::kTrivialAugmentWide, o.op, o.bin, 31, 224, 224));
    }
    if (augment::is_signed(o.op)) signs[o.negative ? 1 : 0] += 1;
    else REQUIRE_FALSE(o.negative);
  }
  // 14 ops uniformly (Invert is AutoAugment's only).
  std::vector<double> want(15, n / 14.0);
  want[op_index(PolicyOp::kInvert)] = 0;
  int df = 0;
  double x = chi_square(ops, want, df);
  CHECK(df == 13);
  CHECK(x < critical(df));
  const double with_bins = n - ops[op_index(PolicyOp::kIdentity)] - ops[op_index(PolicyOp::kAutoContrast)] -
                           ops[op_index(PolicyOp::kEqualize)];
  x = chi_square(bins, std::vector<double>(31, with_bins / 31), df);
  CHECK(x < critical(df));
  x = chi_square(signs, std::vector<double>(2, (signs[0] + signs[1]) / 2), df);
  CHECK(x < critical(df));
  // And the statistic is not blind: a skewed count of the same size fails.
  std::vector<double> skewed = ops;
  skewed[0] += n / 14.0 * 0.15;
  skewed[1] -= n / 14.0 * 0.15;
  CHECK(chi_square(skewed, want, df) > critical(13));
}

TEST_CASE("rand_augment: num_ops ops uniformly at the configured magnitude, signs half and half",
          "[augment][policy]") {
  augment::PolicyParams p;
  p.kind = PolicyKind::kRandAugment;
  p.num_ops = 3;
  p.magnitude = 7;
  const int n = 8000;
  std::vector<double> ops(15, 0), signs(2, 0);
  for (int id = 0; id < n; ++id) {
    CounterRng rng(5, 0, static_cast<std::uint64_t>(id), kStreamColor);
    const auto d = augment::draw_policy(p, 96, 64, rng);
    REQUIRE(d.count == 3);
    for (int i = 0; i < d.count; ++i) {
      const auto& o = d.ops[i];
      ops[op_index(o.op)] += 1;
      REQUIRE(o.bin == (augment::has_magnitude(o.op) ? 7 : -1));
      if (augment::is_signed(o.op)) signs[o.negative ? 1 : 0] += 1;
    }
  }
  std::vector<double> want(15, 3.0 * n / 14);
  want[op_index(PolicyOp::kInvert)] = 0;
  int df = 0;
  double x = chi_square(ops, want, df);  // (df is set by the call: evaluate it first)
  CHECK(x < critical(df));
  x = chi_square(signs, std::vector<double>(2, (signs[0] + signs[1]) / 2), df);
  CHECK(x < critical(df));
  // TranslateX's table scales with the width (150/331 of it at the last bin).
  CHECK(augment::magnitude_value(PolicyKind::kRandAugment, PolicyOp::kTranslateX, 30, 31, 64, 96) ==
        Approx(150.0 / 331.0 * 96).epsilon(1e-6));
}

TEST_CASE("auto_augment imagenet: sub-policies uniformly, each op applied with its probability",
          "[augment][policy]") {
  augment::PolicyParams p;
  p.kind = PolicyKind::kAutoAugmentImagenet;
  const auto table = augment::auto_augment_imagenet();
  REQUIRE(table.size() == 25);
  // Which (op, bin) pairs a sub-policy applies identifies the outcome: count each sub-policy's
  // four outcomes (neither, first, second, both) as one cell. Sub-policies with the same pair
  // of ops (the table repeats some) are pooled, as their outcomes look the same.
  const int n = 30000;
  std::map<std::vector<int>, double> observed, expected;
  auto key = [](const augment::PolicyDraws& d) {
    std::vector<int> k;
    for (int i = 0; i < d.count; ++i) k.push_back(static_cast<int>(d.ops[i].op) * 100 + d.ops[i].bin + 1);
    return k;
  };
  for (const auto& sub : table) {
    for (int mask = 0; mask < 4; ++mask) {
      const double p0 = (mask & 1) ? sub[0].p : 1 - sub[0].p, p1 = (mask & 2) ? sub[1].p : 1 - sub[1].p;
      augment::PolicyDraws d;
      for (int i = 0; i < 2; ++i) {
        if (mask & (1 << i)) d.ops[d.count++] = {sub[i].op, sub[i].bin, false, 0};
      }
      expected[key(d)] += n / 25.0 * p0 * p1;
    }
  }
  for (int id = 0; id < n; ++id) {
    CounterRng rng(9, 1, static_cast<std::uint64_t>(id), kStreamColor);
    const auto d = augment::draw_policy(p, 224, 224, rng);
    REQUIRE(expected.count(key(d)) == 1);
    observed[key(d)] += 1;
    for (int i = 0; i < d.count; ++i) {
      if (!augment::is_signed(d.ops[i].op)) REQUIRE(d.ops[i].magnitude >= 0);
    }
  }
  std::vector<double> o, e;
  for (const auto& [k, v] : expected) {
    o.push_back(observed[k]);
    e.push_back(v);
  }
  int df = 0;
  const double x = chi_square(o, e, df);
  CHECK(df > 20);
  CHECK(x < critical(df));
}

TEST_CASE("policy ops: translate moves whole pixels with black fill, solarize's threshold is the ceiling, invert",
          "[augment][policy]") {
  auto rgb = policy_card();
  augment::PolicyDraw d{PolicyOp::kTranslateX, 0, false, 4.9};  // int(4.9) = 4 pixels right
  augment::apply_policy_op(rgb.data(), 32, 24, d, Interpolation::kNearest);
  const auto c = policy_card();
  int off = 0;
  for (int y = 0; y < 24; ++y) {
    for (int x = 0; x < 32; ++x) {
      for (int k = 0; k < 3; ++k) off += rgb[(y * 32 + x) * 3 + k] != (x < 4 ? 0 : c[(y * 32 + x - 4) * 3 + k]);
    }
  }
  CHECK(off == 0);
  std::uint8_t px[6] = {127, 128, 200, 0, 255, 10};
  augment::apply_policy_op(px, 2, 1, {PolicyOp::kSolarize, 0, false, 127.5}, Interpolation::kNearest);
  CHECK((px[0] == 127 && px[1] == 127 && px[2] == 55 && px[4] == 0));
  augment::apply_policy_op(px, 2, 1, {PolicyOp::kInvert, -1, false, 0}, Interpolation::kNearest);
  CHECK((px[0] == 128 && px[3] == 255));
  // ShearX about the top-left corner: the top row stays, lower rows move sideways.
  auto s = policy_card();
  augment::apply_policy_op(s.data(), 32, 24, {PolicyOp::kShearX, 0, false, 0.3}, Interpolation::kNearest);
  CHECK(std::equal(s.begin(), s.begin() + 32 * 3, c.begin()));
  CHECK(!std::equal(s.end() - 32 * 3, s.end(), c.end() - 32 * 3));
}

TEST_CASE("policy steps draw per (seed, epoch, id) and change the image", "[augment][policy]") {
  for (auto kind : {PolicyKind::kTrivialAugmentWide, PolicyKind::kRandAugment, PolicyKind::kAutoAugmentImagenet}) {
    augment::AugmentStep s;
    s.kind = augment::AugmentStep::Kind::kPolicy;
    s.policy.kind = kind;
    auto run = [&](std::uint64_t id) {
      auto rgb = policy_card();
      CounterRng rng(7, 1, id, kStreamColor);
      augment::apply_augment({s}, rgb.data(), 32, 24, rng);
      return rgb;
    };
    int changed = 0, differ = 0;
    for (std::uint64_t id = 0; id < 20; ++id) {
      REQUIRE(run(id) == run(id));
      changed += run(id) != policy_card();
      differ += run(id) != run(id + 1);
    }
    CHECK(changed > 10);
    CHECK(differ > 10);
  }
}
