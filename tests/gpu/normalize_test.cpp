// gpu tier: the daemon's normalize kernel against a CPU reference on fresh random inputs.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <random>

#include "gpu_test_support.hpp"

using stoker::gputest::NormalizeCase;

namespace {

// Runs one case on fresh random pixels; returns the largest error and fails on any element
// outside the tolerance.
void check_case(const NormalizeCase& c, std::mt19937& rng, const char* label) {
  const std::size_t n = static_cast<std::size_t>(c.images) * c.channels * c.height * c.width;
  std::vector<std::uint8_t> in(n);
  for (auto& v : in) v = static_cast<std::uint8_t>(rng() & 0xff);
  std::vector<float> out;
  std::string why;
  REQUIRE(stoker::gputest::normalize_on_device(in, c, out, why));
  double max_err = 0;
  std::size_t bad = 0, first_bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double err = std::fabs(out[i] - stoker::gputest::normalize_reference(in[i], i, c));
    if (!(err <= stoker::gputest::normalize_tolerance(in[i], i, c))) {
      if (bad++ == 0) first_bad = i;
    }
    if (err > max_err || std::isnan(err)) max_err = std::isnan(err) ? INFINITY : err;
  }
  std::printf("normalize %-28s %ux%ux%ux%u %s %s: max abs error vs CPU %.3g\n", label, c.images, c.channels,
              c.height, c.width, c.nhwc ? "NHWC" : "NCHW", c.out_half ? "float16" : "float32", max_err);
  INFO(label << ": " << bad << " element(s) outside tolerance, first at " << first_bad);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("normalize kernel matches the CPU reference: ImageNet batch, every layout and dtype", "[gpu][normalize]") {
  stoker::gputest::skip_without_device();
  const unsigned seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  NormalizeCase c;
  c.images = 16;
  c.height = c.width = 224;
  const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
  for (int i = 0; i < 3; ++i) {
    c.mean[i] = mean[i];
    c.stddev[i] = sd[i];
  }
  for (bool nhwc : {false, true}) {
    for (bool half : {false, true}) {
      c.nhwc = nhwc;
      c.out_half = half;
      check_case(c, rng, "imagenet");
    }
  }
}

TEST_CASE("normalize kernel matches the CPU reference: random sizes, channels and statistics", "[gpu][normalize]") {
  stoker::gputest::skip_without_device();
  const unsigned seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::uint32_t> side(1, 97), images(1, 9), channels(1, 4);
  std::uniform_real_distribution<float> mean(-1.0f, 1.0f), sd(0.05f, 2.0f);
  for (int k = 0; k < 24; ++k) {
    NormalizeCase c;
    c.images = images(rng);
    c.channels = channels(rng);
    c.height = side(rng);  // odd sizes: planes that start off a 4-element boundary
    c.width = side(rng);
    c.nhwc = (k & 1) != 0;
    c.out_half = (k & 2) != 0;
    for (int i = 0; i < 4; ++i) {
      c.mean[i] = mean(rng);
      c.stddev[i] = sd(rng);
    }
    check_case(c, rng, "random");
  }
}

TEST_CASE("normalize kernel refuses a misaligned output pointer", "[gpu][normalize]") {
  stoker::gputest::skip_without_device();
  CHECK(stoker::gputest::normalize_refuses_misaligned_output());
}
