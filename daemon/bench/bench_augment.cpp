// stoker_bench_augment DIR [ITERATIONS [OP]]: microseconds per sample of every augment op on one
// core, on 224x224 crops of real photos (Resize 256 + CenterCrop 224 of DIR's JPEGs, decoded
// once, in memory). Each op runs on a fresh copy of a crop; the copy's own cost is measured
// apart and subtracted. Time is the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so a machine
// shared with other work inflates the figures less than wall time would. Prints "<op> <us per
// sample>" lines (scripts/bench-augment.py reads them and sets torchvision's figures beside
// them). The recipe's steps after the augment ops (issue #36) are here too: random erasing on a
// float32 sample, and MixUp/CutMix of a float32 batch of 64, whose per-batch cost is spread
// over its samples (they ignore the crop they are handed).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <time.h>

#include "augment/blur.hpp"
#include "augment/color_ops.hpp"
#include "augment/erasing.hpp"
#include "augment/geometric.hpp"
#include "augment/hue.hpp"
#include "augment/pixel_math.hpp"
#include "augment/policies.hpp"
#include "bench/bench_common.hpp"
#include "core/rng.hpp"
#include "image/sample_processor.hpp"
#include "job/batch_mix.hpp"

namespace fs = std::filesystem;
using namespace stoker;

namespace {

constexpr int kSide = 224;

constexpr std::size_t kBytes = std::size_t{kSide} * kSide * 3;

std::vector<std::vector<std::uint8_t>> crops_of(const fs::path& dir, std::size_t max_files) {
  image::PipelineSpec spec;  // Resize(256) + CenterCrop(224), uint8 HWC
  spec.layout = proto::Layout::kNHWC;
  image::SampleProcessor p(spec);
  const auto paths = bench::list_files(dir, bench::Walk::kRecursive, true);
  std::vector<std::vector<std::uint8_t>> crops;
  for (const auto& path : paths) {
    if (crops.size() == max_files) break;
    std::vector<std::uint8_t> buf;
    if (!bench::read_file(path, buf)) continue;
    std::vector<std::uint8_t> out(kBytes);
    if (p.process(buf, 0, 0, 0, out.data()).ok()) crops.push_back(std::move(out));
  }
  return crops;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: stoker_bench_augment DIR [ITERATIONS [OP]]\n");
    return 2;
  }
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 400;
  const auto crops = crops_of(argv[1], 32);
  augment::clear_avx_upper_state();  // as apply_augment does after the decode (pixel_math.hpp)
  if (crops.empty()) {
    std::fprintf(stderr, "no JPEG decoded under %s\n", argv[1]);
    return 1;
  }
  std::vector<std::uint8_t> work(kBytes);
  const std::size_t pixels = std::size_t{kSide} * kSide;
  std::vector<std::uint8_t> scratch;
  // Median of 5 rounds of `iterations` samples, each op on a fresh copy of the next crop.
  auto time_op = [&](const std::function<void(std::uint8_t*, std::uint64_t)>& op) {
    std::vector<double> rounds;
    for (int r = 0; r < 5; ++r) {
      const double t0 = bench::thread_cpu_s();
      for (int i = 0; i < iterations; ++i) {
        std::memcpy(work.data(), crops[static_cast<std::size_t>(i) % crops.size()].data(), kBytes);
        op(work.data(), static_cast<std::uint64_t>(r) * iterations + i);
      }
      rounds.push_back((bench::thread_cpu_s() - t0) * 1e6 / iterations);
    }
    return bench::median(rounds);
  };
  const double copy_us = time_op([](std::uint8_t*, std::uint64_t) {});
  const std::string only = argc > 3 ? argv[3] : "";  // one op by name (profiling)
  auto report = [&](const char* name, const std::function<void(std::uint8_t*, std::uint64_t)>& op) {
    if (!only.empty() && only != name) return;
    std::printf("%s %.1f\n", name, std::max(0.0, time_op(op) - copy_us));
    std::fflush(stdout);
  };
  using augment::Interpolation;
  const std::array<float, 3> black{0, 0, 0};
  report("brightness", [&](std::uint8_t* p, std::uint64_t) { augment::adjust_brightness(p, pixels, 1.3); });
  report("contrast", [&](std::uint8_t* p, std::uint64_t) { augment::adjust_contrast(p, pixels, 1.3); });
  report("saturation", [&](std::uint8_t* p, std::uint64_t) { augment::adjust_saturation(p, pixels, 1.3); });
  report("hue", [&](std::uint8_t* p, std::uint64_t) { augment::adjust_hue(p, pixels, 0.1); });
  report("grayscale", [&](std::uint8_t* p, std::uint64_t) { augment::to_grayscale(p, pixels); });
  report("solarize", [&](std::uint8_t* p, std::uint64_t) { augment::solarize(p, pixels, 128); });
  report("posterize", [&](std::uint8_t* p, std::uint64_t) { augment::posterize(p, pixels, 4); });
  report("autocontrast", [&](std::uint8_t* p, std::uint64_t) { augment::autocontrast(p, pixels); });
  report("equalize", [&](std::uint8_t* p, std::uint64_t) { augment::equalize(p, pixels); });
  report("sharpness", [&](std::uint8_t* p, std::uint64_t) { augment::adjust_sharpness(p, kSide, kSide, 2.0); });
  report("invert", [&](std::uint8_t* p, std::uint64_t) { augment::invert(p, pixels); });
  report("gaussian_blur_k5", [&](std::uint8_t* p, std::uint64_t) { augment::gaussian_blur(p, kSide, kSide, 5, 5, 1.0, 1.0); });
  report("gaussian_blur_k23", [&](std::uint8_t* p, std::uint64_t) { augment::gaussian_blur(p, kSide, kSide, 23, 23, 1.5, 1.5); });
  report("rotate_nearest", [&](std::uint8_t* p, std::uint64_t) {
    augment::rotate(p, kSide, kSide, 17.0, Interpolation::kNearest, black, scratch);
  });
  report("rotate_bilinear", [&](std::uint8_t* p, std::uint64_t) {
    augment::rotate(p, kSide, kSide, 17.0, Interpolation::kBilinear, black, scratch);
  });
  augment::AffineParams ap;
  ap.angle = 10;
  ap.translate = {5, -7};
  ap.scale = 1.1;
  ap.shear = {8, -3};
  report("affine_nearest", [&](std::uint8_t* p, std::uint64_t) {
    augment::affine(p, kSide, kSide, ap, Interpolation::kNearest, &black, scratch);
  });
  report("affine_bilinear", [&](std::uint8_t* p, std::uint64_t) {
    augment::affine(p, kSide, kSide, ap, Interpolation::kBilinear, &black, scratch);
  });
  augment::ErasingParams ep;
  ep.p = 1;
  report("random_erasing", [&](std::uint8_t* p, std::uint64_t id) {
    CounterRng rng(1, 0, id, kStreamColor);
    augment::erase_rgb8(p, kSide, augment::erase_box(ep, kSide, kSide, rng), ep);
  });
  // RandomErasing after normalize (the references' place): the float32 NCHW sample, p 1.
  std::vector<float> as_f32(kBytes);
  report("random_erasing_f32", [&](std::uint8_t*, std::uint64_t id) {
    CounterRng rng(1, 0, id, kStreamErasing);
    augment::erase_float(as_f32.data(), augment::FloatKind::kFloat32, true, kSide, kSide,
                         augment::erase_box(ep, kSide, kSide, rng), ep, rng);
  });
  // MixUp and CutMix of a float32 batch of 64 (10 classes, as the bench photos), per sample:
  // what the worker that finishes a batch runs (job/batch_mix.cpp), one batch per 64 calls.
  // Its 38 MB batch is made only when these ops run (its page faults would otherwise show in a
  // `perf record` of any one op).
  const bool mix_wanted = only.empty() || only == "mixup_f32_per_sample" || only == "cutmix_f32_per_sample";
  constexpr std::uint32_t kMixBatch = 64;
  std::vector<float> mix_images(mix_wanted ? kBytes * kMixBatch : 0);
  for (std::size_t k = 0; k < mix_images.size(); ++k) mix_images[k] = static_cast<float>(k % 251) / 251.0f;
  std::vector<std::int64_t> mix_labels(kMixBatch);  // (report() skips the ops when !mix_wanted)
  for (std::uint32_t i = 0; i < kMixBatch; ++i) mix_labels[i] = i % 10;
  std::vector<float> soft(kMixBatch * 10);
  const proto::BatchGeometry mix_geometry{kMixBatch, 3, kSide, kSide, proto::DType::kFloat32, proto::Layout::kNCHW,
                                          kBytes * sizeof(float)};
  for (auto [name, cutmix] : {std::pair{"mixup_f32_per_sample", false}, std::pair{"cutmix_f32_per_sample", true}}) {
    config::MixConfig mix;
    (cutmix ? mix.cutmix_alpha : mix.mixup_alpha) = cutmix ? 1.0 : 0.2;
    report(name, [&](std::uint8_t*, std::uint64_t id) {
      if (id % kMixBatch != 0) return;
      const auto d = job::draw_mix(mix, 1, 0, id / kMixBatch, 0, kSide, kSide);
      job::apply_mix(d, {mix_images.data(), kMixBatch, mix_geometry, mix_labels.data(), soft.data(), 10,
                         proto::DType::kFloat32});
    });
  }
  augment::AugmentStep jitter;
  jitter.kind = augment::AugmentStep::Kind::kColorJitter;
  jitter.brightness = jitter.contrast = jitter.saturation = {0.6, 1.4};
  jitter.hue = {-0.1, 0.1};
  report("color_jitter_bcsh", [&](std::uint8_t* p, std::uint64_t id) {
    CounterRng rng(1, 0, id, kStreamColor);
    augment::apply_augment({jitter}, p, kSide, kSide, rng);
  });
  // The automatic policies as whole steps (mean over their random op mix) ...
  for (auto [name, kind] : {std::pair{"trivial_augment_wide", augment::PolicyKind::kTrivialAugmentWide},
                            std::pair{"rand_augment", augment::PolicyKind::kRandAugment},
                            std::pair{"auto_augment", augment::PolicyKind::kAutoAugmentImagenet}}) {
    augment::AugmentStep s;
    s.kind = augment::AugmentStep::Kind::kPolicy;
    s.policy.kind = kind;
    for (auto mode : {Interpolation::kNearest, Interpolation::kBilinear}) {
      s.policy.interpolation = mode;
      const std::string label = std::string(name) + (mode == Interpolation::kNearest ? "_nearest" : "_bilinear");
      const std::vector<augment::AugmentStep> steps{s};
      report(label.c_str(), [&](std::uint8_t* p, std::uint64_t id) {
        CounterRng rng(1, 0, id, kStreamColor);
        augment::apply_augment(steps, p, kSide, kSide, rng);
      });
    }
  }
  // ... and each op of TrivialAugmentWide at its middle bin (bilinear warps).
  for (augment::PolicyOp op : augment::policy_ops(augment::PolicyKind::kTrivialAugmentWide)) {
    augment::PolicyDraw d{op, augment::has_magnitude(op) ? 15 : -1, false, 0};
    if (d.bin >= 0) d.magnitude = augment::magnitude_value(augment::PolicyKind::kTrivialAugmentWide, op, 15, 31, kSide, kSide);
    const std::string label = std::string("ta_") + augment::to_string(op);
    report(label.c_str(), [&](std::uint8_t* p, std::uint64_t) { augment::apply_policy_op(p, kSide, kSide, d, Interpolation::kBilinear); });
  }
  return 0;
}
