// Unit tier: the augmentations of daemon/augment/ (hue, Gaussian blur, random erasing), alone
// and as pipeline steps: same (seed, epoch, sample id) gives the same pixels, p: 0 is the
// identity, p: 1 changes the image. Pixel agreement with torchvision is
// tests/fidelity/augment_fidelity.py's job.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "augment/blur.hpp"
#include "augment/erasing.hpp"
#include "augment/geometric.hpp"
#include "augment/hue.hpp"
#include "core/rng.hpp"
#include "augment/color_ops.hpp"
#include "image/sample_processor.hpp"

using namespace stoker;
using augment::AugmentStep;
using image::PipelineSpec;
using proto::DType;
using proto::Layout;

namespace {

std::vector<std::uint8_t> read(const std::string& rel) {
  std::ifstream in(std::string(STOKER_TEST_DATA_DIR) + "/" + rel, std::ios::binary);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A deterministic 32x24 test card: gradients and a few saturated patches.
std::vector<std::uint8_t> card(int w = 32, int h = 24) {
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      std::uint8_t* p = &rgb[(static_cast<std::size_t>(y) * w + x) * 3];
      p[0] = static_cast<std::uint8_t>(x * 255 / (w - 1));
      p[1] = static_cast<std::uint8_t>(y * 255 / (h - 1));
      p[2] = static_cast<std::uint8_t>((x * 7 + y * 13) % 256);
    }
  }
  return rgb;
}

std::vector<std::uint8_t> augmented(const std::vector<AugmentStep>& steps, std::uint64_t id, int w = 32, int h = 24) {
  auto rgb = card(w, h);
  CounterRng rng(7, 1, id, kStreamColor);
  augment::apply_augment(steps, rgb.data(), w, h, rng);
  return rgb;
}

PipelineSpec float_train_spec() {
  PipelineSpec s;
  s.geometry = image::Geometry::kRandomResizedCrop;
  s.out_height = s.out_width = 48;
  s.dtype = DType::kFloat32;
  s.normalize = true;
  s.mean = {0.485f, 0.456f, 0.406f};
  s.stddev = {0.229f, 0.224f, 0.225f};
  return s;
}

std::vector<std::uint8_t> run(const PipelineSpec& spec, std::uint64_t id, std::uint64_t epoch = 0) {
  static const auto data = read("demo/flower/flower_01.jpg");
  image::SampleProcessor p(spec);
  std::vector<std::uint8_t> out(spec.sample_bytes(), 0);
  REQUIRE(p.process(data, 42, epoch, id, out.data()).ok());
  return out;
}

}  // namespace

TEST_CASE("hue: shifts turn the colour circle as torchvision's adjust_hue", "[augment]") {
  std::uint8_t red[3] = {255, 0, 0};
  augment::adjust_hue(red, 1, 0.5);  // half a turn: cyan
  CHECK((red[0] == 0 && red[1] == 255 && red[2] == 255));
  std::uint8_t red2[3] = {255, 0, 0};
  augment::adjust_hue(red2, 1, -1.0 / 3.0);  // a third back: blue
  CHECK((red2[0] == 0 && red2[1] == 0 && red2[2] == 255));
  std::uint8_t gray[3] = {77, 77, 77};  // no hue to turn
  augment::adjust_hue(gray, 1, 0.3);
  CHECK((gray[0] == 77 && gray[1] == 77 && gray[2] == 77));
  // A zero shift is a round trip through float HSV and truncation: at most one off.
  auto rgb = card();
  const auto before = rgb;
  augment::adjust_hue(rgb.data(), rgb.size() / 3, 0.0);
  for (std::size_t i = 0; i < rgb.size(); ++i) REQUIRE(std::abs(int(rgb[i]) - int(before[i])) <= 1);
}

TEST_CASE("color_jitter with hue: a fixed shift equals adjust_hue, and draws are per (seed, epoch, id)",
          "[augment]") {
  AugmentStep jitter;
  jitter.kind = AugmentStep::Kind::kColorJitter;
  jitter.hue = {0.2, 0.2};
  auto expect = card();
  augment::adjust_hue(expect.data(), expect.size() / 3, 0.2);
  CHECK(augmented({jitter}, 3) == expect);
  jitter.hue = {-0.5, 0.5};
  jitter.brightness = {0.5, 1.5};
  CHECK(augmented({jitter}, 3) == augmented({jitter}, 3));
  CHECK(augmented({jitter}, 3) != augmented({jitter}, 4));
}

TEST_CASE("gaussian_blur: kernel sums to 1, flat images stay flat, size 1 is the identity", "[augment]") {
  const auto k = augment::gaussian_kernel1d(9, 2.0);
  REQUIRE(k.size() == 9);
  float sum = 0;
  for (float v : k) sum += v;
  CHECK(std::abs(sum - 1.0f) < 1e-6f);
  CHECK(k[4] > k[3]);
  CHECK(k[0] == k[8]);  // symmetric
  std::vector<std::uint8_t> flat(20 * 10 * 3, 133);
  augment::gaussian_blur(flat.data(), 20, 10, 7, 5, 1.5, 1.5);
  CHECK(flat == std::vector<std::uint8_t>(20 * 10 * 3, 133));
  auto rgb = card();
  const auto before = rgb;
  augment::gaussian_blur(rgb.data(), 32, 24, 1, 1, 1.0, 1.0);
  CHECK(rgb == before);
  augment::gaussian_blur(rgb.data(), 32, 24, 5, 5, 1.0, 1.0);
  CHECK(rgb != before);
}

TEST_CASE("gaussian_blur step: sigma is drawn per (seed, epoch, id)", "[augment]") {
  AugmentStep blur;
  blur.kind = AugmentStep::Kind::kGaussianBlur;
  blur.kernel = {7, 7};
  blur.sigma = {0.1, 3.0};
  CHECK(augmented({blur}, 11) == augmented({blur}, 11));
  CHECK(augmented({blur}, 11) != augmented({blur}, 12));
  CHECK(augmented({blur}, 11) != card());
}

TEST_CASE("random_erasing: boxes fit strictly inside, none when nothing fits, p: 0 never erases", "[augment]") {
  augment::ErasingParams e;
  e.p = 1;
  int erased = 0;
  for (std::uint64_t id = 0; id < 200; ++id) {
    CounterRng rng(1, 0, id, kStreamColor);
    const augment::EraseBox b = augment::erase_box(e, 24, 32, rng);
    if (b.empty()) continue;
    ++erased;
    REQUIRE(b.height < 24);
    REQUIRE(b.width < 32);
    REQUIRE(b.top >= 0);
    REQUIRE(b.left >= 0);
    REQUIRE(b.top + b.height <= 24);
    REQUIRE(b.left + b.width <= 32);
  }
  CHECK(erased > 150);  // the defaults fit nearly always
  e.scale = {1, 1};     // the whole image: never strictly inside
  e.ratio = {1, 1};
  for (std::uint64_t id = 0; id < 20; ++id) {
    CounterRng rng(1, 0, id, kStreamColor);
    REQUIRE(augment::erase_box(e, 24, 32, rng).empty());
  }
  e = {};
  e.p = 0;
  for (std::uint64_t id = 0; id < 20; ++id) {
    CounterRng rng(1, 0, id, kStreamColor);
    REQUIRE(augment::erase_box(e, 24, 32, rng).empty());
  }
}

TEST_CASE("random_erasing step on uint8 pixels: deterministic, p: 0 is the identity, p: 1 writes the value",
          "[augment]") {
  AugmentStep erase;
  erase.kind = AugmentStep::Kind::kErasing;
  erase.erasing.p = 0;
  CHECK(augmented({erase}, 5) == card());
  erase.erasing.p = 1;
  erase.erasing.value = {10, 20, 30};
  const auto a = augmented({erase}, 5);
  CHECK(a == augmented({erase}, 5));
  CHECK(a != card());
  CHECK(a != augmented({erase}, 6));
  const auto c = card();
  int changed = 0;
  for (std::size_t i = 0; i < a.size(); i += 3) {
    if (std::memcmp(&a[i], &c[i], 3) == 0) continue;
    ++changed;
    REQUIRE((a[i] == 10 && a[i + 1] == 20 && a[i + 2] == 30));
  }
  CHECK(changed > 0);
}

TEST_CASE("random_erasing after normalize erases the float output in either layout", "[augment]") {
  PipelineSpec spec = float_train_spec();
  const auto plain = run(spec, 3);
  augment::ErasingParams e;
  e.p = 0;
  spec.erase_output = {e};
  CHECK(run(spec, 3) == plain);  // p: 0 is the identity (and the crop's draws are untouched)
  e.p = 1;
  e.value = {-1.5f, 0.25f, 2.0f};
  spec.erase_output = {e};
  const auto erased = run(spec, 3);
  CHECK(erased == run(spec, 3));
  CHECK(erased != plain);
  CHECK(erased != run(spec, 4));
  // NCHW: every changed value of plane c is value[c].
  const std::size_t plane = 48 * 48;
  std::vector<float> a(erased.size() / 4), b(plain.size() / 4);
  std::memcpy(a.data(), erased.data(), erased.size());
  std::memcpy(b.data(), plain.data(), plain.size());
  std::size_t changed = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    ++changed;
    REQUIRE(a[i] == e.value[i / plane]);
  }
  CHECK(changed > 0);
  // NHWC float16 with random values: deterministic, and different where erased.
  spec.layout = Layout::kNHWC;
  spec.dtype = DType::kFloat16;
  e.random = true;
  spec.erase_output = {e};
  const auto r1 = run(spec, 9);
  CHECK(r1 == run(spec, 9));
  spec.erase_output.clear();
  CHECK(r1 != run(spec, 9));
}

TEST_CASE("rotate: 0 degrees is the identity, 180 reverses, positive turns counter-clockwise", "[augment]") {
  std::vector<std::uint8_t> scratch;
  for (auto mode : {augment::Interpolation::kNearest, augment::Interpolation::kBilinear}) {
    auto rgb = card();
    augment::rotate(rgb.data(), 32, 24, 0.0, mode, {0, 0, 0}, scratch);
    CHECK(rgb == card());
    augment::rotate(rgb.data(), 32, 24, 180.0, mode, {0, 0, 0}, scratch);
    const auto c = card();
    int off = 0;
    for (int y = 0; y < 24; ++y) {
      for (int x = 0; x < 32; ++x) {
        for (int k = 0; k < 3; ++k) {
          off += rgb[(y * 32 + x) * 3 + k] != c[((23 - y) * 32 + (31 - x)) * 3 + k];
        }
      }
    }
    CHECK(off == 0);
  }
  // A bright pixel right of the centre of a square image goes up (towards row 0) for +90.
  std::vector<std::uint8_t> img(9 * 9 * 3, 0);
  img[(4 * 9 + 7) * 3] = 255;
  augment::rotate(img.data(), 9, 9, 90.0, augment::Interpolation::kNearest, {0, 0, 0}, scratch);
  CHECK(img[(1 * 9 + 4) * 3] == 255);
  // The corners come from outside: fill.
  std::vector<std::uint8_t> sq(16 * 16 * 3, 100);
  augment::rotate(sq.data(), 16, 16, 45.0, augment::Interpolation::kNearest, {7, 8, 9}, scratch);
  CHECK((sq[0] == 7 && sq[1] == 8 && sq[2] == 9));
  CHECK(sq[(8 * 16 + 8) * 3] == 100);
}

TEST_CASE("random_rotation step: the angle is drawn per (seed, epoch, id)", "[augment]") {
  AugmentStep rot;
  rot.kind = AugmentStep::Kind::kRotation;
  rot.degrees = {-30, 30};
  rot.interpolation = augment::Interpolation::kBilinear;
  CHECK(augmented({rot}, 1) == augmented({rot}, 1));
  CHECK(augmented({rot}, 1) != augmented({rot}, 2));
  CHECK(augmented({rot}, 1) != card());
  rot.degrees = {0, 0};
  CHECK(augmented({rot}, 1) == card());
}
