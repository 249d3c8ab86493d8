// Unit tier: MixUp/CutMix on a finished batch (job/batch_mix.hpp) and the job keys that
// turn it on. The end-to-end checks (pixels against an unmixed run of the same seed, workers,
// resume) are in tests/integration/mix_test.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/half.hpp"
#include "job/batch_mix.hpp"

using namespace stoker;
using job::MixKind;

namespace {

const std::string kBase = std::string(STOKER_TEST_DATA_DIR) + "/configs";

std::string job_with(const std::string& lines) {
  return "jobs:\n"
         "  train:\n"
         "    source: {root: .}\n"
         "    batch_size: 8\n" +
         lines +
         "    pipeline:\n"
         "      - decode: {}\n"
         "      - random_resized_crop: {size: 32}\n";
}

config::JobConfig parse_job(const std::string& lines) {
  return config::parse_config(job_with(lines), "mix.yaml", kBase).jobs.at(0);
}

std::string refusal(const std::string& lines) {
  try {
    config::parse_config(job_with(lines), "mix.yaml", kBase);
  } catch (const config::ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

// A batch of n random samples of geometry g, bytes filled from a fixed generator.
std::vector<std::uint8_t> random_batch(const proto::BatchGeometry& g, std::uint32_t n, std::uint64_t seed) {
  std::vector<std::uint8_t> v(g.image_bytes * n);
  CounterRng rng(seed, 0, 0, 99);
  const std::uint64_t values = g.image_bytes / proto::dtype_size(g.dtype) * n;
  for (std::uint64_t k = 0; k < values; ++k) {
    const double x = rng.uniform();
    if (g.dtype == proto::DType::kUInt8) {
      v[k] = static_cast<std::uint8_t>(rng.below(256));
    } else if (g.dtype == proto::DType::kFloat32) {
      const float f = static_cast<float>(x * 4 - 2);
      std::memcpy(v.data() + 4 * k, &f, 4);
    } else {
      const std::uint16_t h = float_to_half(static_cast<float>(x * 4 - 2));
      std::memcpy(v.data() + 2 * k, &h, 2);
    }
  }
  return v;
}

proto::BatchGeometry geometry(proto::DType dtype, proto::Layout layout, std::uint32_t h = 6, std::uint32_t w = 5) {
  proto::BatchGeometry g{};
  g.batch_size = 8;
  g.channels = 3;
  g.height = h;
  g.width = w;
  g.dtype = dtype;
  g.layout = layout;
  g.image_bytes = std::uint64_t{3} * h * w * proto::dtype_size(dtype);
  return g;
}

float half_value(std::uint16_t h) {
  const int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  const float mag = exp == 0 ? std::ldexp(static_cast<float>(mant), -24) : std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
  return (h & 0x8000) ? -mag : mag;
}

double value_at(const std::vector<std::uint8_t>& v, proto::DType t, std::uint64_t k) {
  if (t == proto::DType::kUInt8) return v[k];
  if (t == proto::DType::kFloat32) {
    float f;
    std::memcpy(&f, v.data() + 4 * k, 4);
    return f;
  }
  std::uint16_t h;
  std::memcpy(&h, v.data() + 2 * k, 2);
  return half_value(h);
}

}  // namespace

TEST_CASE("batch mix: Beta(a, a) has the right mean and variance, also for tiny alphas", "[batch_mix]") {
  for (const double a : {0.2, 1.0, 2.0}) {
    CounterRng rng(5, 0, 0, 1);
    const int n = 40000;
    double sum = 0, sq = 0;
    for (int i = 0; i < n; ++i) {
      const double x = job::sample_beta(rng, a, a);
      REQUIRE(x >= 0);
      REQUIRE(x <= 1);
      sum += x;
      sq += x * x;
    }
    const double mean = sum / n, var = sq / n - mean * mean;
    INFO("alpha " << a);
    CHECK(std::abs(mean - 0.5) < 0.01);
    CHECK(std::abs(var - 1.0 / (4 * (2 * a + 1))) < 0.006);  // Var Beta(a, a) = 1 / (4 (2a + 1))
  }
  CounterRng rng(5, 0, 0, 2);
  int extreme = 0;
  for (int i = 0; i < 2000; ++i) {
    const double x = job::sample_beta(rng, 0.01, 0.01);
    REQUIRE(std::isfinite(x));
    extreme += (x < 1e-3 || x > 1 - 1e-3) ? 1 : 0;
  }
  CHECK(extreme > 1800);  // Beta(0.01, 0.01) sits almost entirely at the ends
}

TEST_CASE("batch mix: one draw per (seed, epoch, batch, rank), CutMix with switch_prob", "[batch_mix]") {
  config::MixConfig mix;
  mix.mixup_alpha = 0.2;
  mix.cutmix_alpha = 1.0;
  mix.switch_prob = 0.3;
  const auto a = job::draw_mix(mix, 7, 1, 5, 0, 224, 224);
  const auto b = job::draw_mix(mix, 7, 1, 5, 0, 224, 224);
  CHECK(a.kind == b.kind);
  CHECK(a.lambda == b.lambda);
  CHECK(a.x1 == b.x1);
  CHECK(a.y2 == b.y2);
  std::set<double> lambdas;
  int cutmix = 0;
  const int n = 4000;
  for (std::uint64_t batch = 0; batch < n; ++batch) {
    const auto d = job::draw_mix(mix, 7, 1, batch, 0, 224, 160);
    lambdas.insert(d.lambda);
    REQUIRE(d.lambda >= 0);
    REQUIRE(d.lambda <= 1);
    if (d.kind == MixKind::kCutMix) {
      ++cutmix;
      REQUIRE(d.x1 <= d.x2);
      REQUIRE(d.x2 <= 160);
      REQUIRE(d.y1 <= d.y2);
      REQUIRE(d.y2 <= 224);
      // λ corrected to the clamped box: 1 - area / image area.
      REQUIRE(d.lambda == Approx(1.0 - double(d.x2 - d.x1) * (d.y2 - d.y1) / (224.0 * 160)).margin(1e-12));
    } else {
      REQUIRE(d.kind == MixKind::kMixUp);
    }
  }
  CHECK(std::abs(cutmix / double(n) - 0.3) < 0.03);
  CHECK(lambdas.size() > n / 2);  // λ varies between batches
  // Other epochs, seeds and ranks draw differently.
  CHECK(job::draw_mix(mix, 7, 2, 5, 0, 224, 224).lambda != a.lambda);
  CHECK(job::draw_mix(mix, 8, 1, 5, 0, 224, 224).lambda != a.lambda);
  CHECK(job::draw_mix(mix, 7, 1, 5, 1, 224, 224).lambda != a.lambda);

  config::MixConfig only_mixup;
  only_mixup.mixup_alpha = 1;
  config::MixConfig only_cutmix;
  only_cutmix.cutmix_alpha = 1;
  for (std::uint64_t batch = 0; batch < 50; ++batch) {
    CHECK(job::draw_mix(only_mixup, 1, 0, batch, 0, 32, 32).kind == MixKind::kMixUp);
    CHECK(job::draw_mix(only_cutmix, 1, 0, batch, 0, 32, 32).kind == MixKind::kCutMix);
  }
  CHECK(job::draw_mix(config::MixConfig{}, 1, 0, 0, 0, 32, 32).kind == MixKind::kNone);
}

TEST_CASE("batch mix: MixUp pixels are lambda x + (1 - lambda) x.roll(1) in every dtype", "[batch_mix]") {
  for (const auto dtype : {proto::DType::kUInt8, proto::DType::kFloat32, proto::DType::kFloat16}) {
    const auto g = geometry(dtype, proto::Layout::kNCHW);
    const std::uint32_t n = 5, classes = 4;
    const auto original = random_batch(g, n, 3);
    auto mixed = original;
    const std::vector<std::int64_t> labels = {0, 3, 3, 1, 2};
    const auto label_dtype = job::soft_label_dtype(dtype);
    std::vector<std::uint8_t> soft(n * classes * proto::dtype_size(label_dtype), 0xff);
    job::MixDraw d;
    d.kind = MixKind::kMixUp;
    d.lambda = 0.3125 + 1e-4;
    job::apply_mix(d, {mixed.data(), n, g, labels.data(), soft.data(), classes, label_dtype});
    const std::uint64_t per = g.image_bytes / proto::dtype_size(dtype);
    const double tol = dtype == proto::DType::kUInt8 ? 0.51 : dtype == proto::DType::kFloat32 ? 1e-5 : 2e-3;
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint32_t p = (i + n - 1) % n;
      for (std::uint64_t k = 0; k < per; ++k) {
        const double want = d.lambda * value_at(original, dtype, i * per + k) + (1 - d.lambda) * value_at(original, dtype, p * per + k);
        INFO("dtype " << int(dtype) << " sample " << i << " value " << k);
        REQUIRE(std::abs(value_at(mixed, dtype, i * per + k) - want) <= tol);
      }
      // Soft row: λ at its own class, 1 - λ at the previous sample's, zero elsewhere.
      for (std::uint32_t c = 0; c < classes; ++c) {
        const double want = (labels[i] == c ? d.lambda : 0.0) + (labels[p] == c ? 1 - d.lambda : 0.0);
        REQUIRE(value_at(soft, label_dtype, i * classes + c) == Approx(want).margin(label_dtype == proto::DType::kFloat16 ? 1e-3 : 1e-7));
      }
    }
  }
}

TEST_CASE("batch mix: CutMix pastes the previous sample's box, NCHW and NHWC", "[batch_mix]") {
  for (const auto layout : {proto::Layout::kNCHW, proto::Layout::kNHWC}) {
    const auto g = geometry(proto::DType::kUInt8, layout, 7, 9);
    const std::uint32_t n = 4, classes = 3;
    const auto original = random_batch(g, n, 4);
    auto mixed = original;
    const std::vector<std::int64_t> labels = {0, 1, 2, 2};
    std::vector<float> soft(n * classes);
    job::MixDraw d;
    d.kind = MixKind::kCutMix;
    d.x1 = 2, d.x2 = 6, d.y1 = 1, d.y2 = 4;
    d.lambda = 1.0 - 12.0 / 63;
    job::apply_mix(d, {mixed.data(), n, g, labels.data(), soft.data(), classes, proto::DType::kFloat32});
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint32_t p = (i + n - 1) % n;
      for (std::uint32_t c = 0; c < 3; ++c) {
        for (std::uint32_t y = 0; y < 7; ++y) {
          for (std::uint32_t x = 0; x < 9; ++x) {
            const std::uint64_t at = layout == proto::Layout::kNCHW ? (c * 7 + y) * 9 + x : (y * 9 + x) * 3 + c;
            const bool in = x >= 2 && x < 6 && y >= 1 && y < 4;
            REQUIRE(mixed[i * g.image_bytes + at] == original[(in ? p : i) * g.image_bytes + at]);
          }
        }
      }
    }
    CHECK(soft[1 * classes + 1] == Approx(d.lambda));
    CHECK(soft[1 * classes + 0] == Approx(1 - d.lambda));
    CHECK(soft[3 * classes + 2] == 1.0f);  // same class as its partner: exactly one-hot
    CHECK(soft[0 * classes + 2] == Approx(1 - d.lambda));  // sample 0's partner is the last
  }
}

TEST_CASE("batch mix: a batch of one or with no draw keeps its pixels and gets one-hot rows", "[batch_mix]") {
  const auto g = geometry(proto::DType::kUInt8, proto::Layout::kNCHW);
  const auto original = random_batch(g, 2, 5);
  auto mixed = original;
  const std::vector<std::int64_t> labels = {1, 7};  // 7 is outside the classes: contributes nothing
  std::vector<float> soft(2 * 3, -1);
  job::MixDraw d;
  d.kind = MixKind::kMixUp;
  d.lambda = 0.4;
  job::apply_mix(d, {mixed.data(), 1, g, labels.data(), soft.data(), 3, proto::DType::kFloat32});
  CHECK(mixed == original);
  CHECK(soft[0] == 0.0f);
  CHECK(soft[1] == 1.0f);
  CHECK(soft[2] == 0.0f);
  job::apply_mix(job::MixDraw{}, {mixed.data(), 2, g, labels.data(), soft.data(), 3, proto::DType::kFloat32});
  CHECK(mixed == original);
  CHECK(soft[3] == 0.0f);
  CHECK(soft[4] == 0.0f);
  CHECK(soft[5] == 0.0f);
}

TEST_CASE("batch mix: job keys mixup, cutmix and mix_switch_prob", "[batch_mix][config]") {
  const auto plain = parse_job("");
  CHECK_FALSE(plain.mix.enabled());
  const auto both = parse_job("    mixup: {alpha: 0.2}\n    cutmix: {alpha: 1.0}\n    mix_switch_prob: 0.25\n");
  CHECK(both.mix.mixup_alpha == 0.2);
  CHECK(both.mix.cutmix_alpha == 1.0);
  CHECK(both.mix.switch_prob == 0.25);
  CHECK(parse_job("    cutmix: {alpha: 1}\n").mix.switch_prob == 0.5);
  CHECK(parse_job("    cutmix: {alpha: 1}\n").mix.mixup_alpha == 0);

  using Catch::Contains;
  using Catch::StartsWith;
  CHECK_THAT(refusal("    mixup: {alpha: 0}\n"), StartsWith("mix.yaml:5:") && Contains("jobs.train.mixup.alpha") &&
                                                       Contains("(0, 1000]"));
  CHECK_THAT(refusal("    mixup: {alpha: -1}\n"), Contains("jobs.train.mixup.alpha"));
  CHECK_THAT(refusal("    cutmix: {alpah: 1}\n"), StartsWith("mix.yaml:5:") && Contains("did you mean 'alpha'"));
  CHECK_THAT(refusal("    cutmix: {}\n"), Contains("jobs.train.cutmix.alpha") && Contains("required"));
  CHECK_THAT(refusal("    cutmix: 1.0\n"), Contains("jobs.train.cutmix") && Contains("expected a mapping"));
  CHECK_THAT(refusal("    mixup: {alpha: 1}\n    mix_switch_prob: 0.5\n"),
             StartsWith("mix.yaml:6:") && Contains("jobs.train.mix_switch_prob") && Contains("both mixup and cutmix"));
  CHECK_THAT(refusal("    mixup: {alpha: 1}\n    cutmix: {alpha: 1}\n    mix_switch_prob: 1.5\n"),
             StartsWith("mix.yaml:7:") && Contains("[0, 1]"));
  CHECK_THAT(refusal("    mix_up: {alpha: 1}\n"), Contains("did you mean 'mixup'"));
}
