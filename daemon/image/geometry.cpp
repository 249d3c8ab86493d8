#include "image/geometry.hpp"

#include <algorithm>
#include <cmath>

namespace stoker::image {
namespace {

// Python's round(): half to even (the default floating-point rounding mode).
long pyround(double v) { return std::lrint(v); }

SourceBox integer_crop(long left, long top, long w, long h) {
  const double x0 = static_cast<double>(left), y0 = static_cast<double>(top);
  const double x1 = x0 + static_cast<double>(w), y1 = y0 + static_cast<double>(h);
  return SourceBox{x0, y0, x1, y1, x0, y0, x1, y1};
}

}  // namespace

SamplePlan plan_sample(const PipelineSpec& spec, std::uint32_t width, std::uint32_t height,
                       CounterRng& rng) {
  SamplePlan plan{};
  const long W = width, H = height;
  switch (spec.geometry) {
    case Geometry::kRandomResizedCrop: {
      const double area = static_cast<double>(W) * static_cast<double>(H);
      const double log_r0 = std::log(spec.ratio[0]), log_r1 = std::log(spec.ratio[1]);
      bool found = false;
      for (int attempt = 0; attempt < 10 && !found; ++attempt) {
        const double target = area * rng.uniform(spec.scale[0], spec.scale[1]);
        const double aspect = std::exp(rng.uniform(log_r0, log_r1));
        const long w = pyround(std::sqrt(target * aspect));
        const long h = pyround(std::sqrt(target / aspect));
        if (w > 0 && w <= W && h > 0 && h <= H) {
          const long top = static_cast<long>(rng.below(static_cast<std::uint64_t>(H - h + 1)));
          const long left = static_cast<long>(rng.below(static_cast<std::uint64_t>(W - w + 1)));
          plan.box = integer_crop(left, top, w, h);
          plan.nearest_x = {left, static_cast<double>(w) / static_cast<double>(spec.out_width), 0};
          plan.nearest_y = {top, static_cast<double>(h) / static_cast<double>(spec.out_height), 0};
          found = true;
        }
      }
      if (!found) {
        const double in_ratio = static_cast<double>(W) / static_cast<double>(H);
        long w = W, h = H;
        if (in_ratio < spec.ratio[0]) {
          h = std::max(1L, pyround(static_cast<double>(w) / spec.ratio[0]));
        } else if (in_ratio > spec.ratio[1]) {
          w = std::max(1L, pyround(static_cast<double>(h) * spec.ratio[1]));
        }
        plan.box = integer_crop((W - w) / 2, (H - h) / 2, w, h);
        plan.nearest_x = {(W - w) / 2, static_cast<double>(w) / static_cast<double>(spec.out_width), 0};
        plan.nearest_y = {(H - h) / 2, static_cast<double>(h) / static_cast<double>(spec.out_height), 0};
      }
      break;
    }
    case Geometry::kResizeCenterCrop: {
      const long S = spec.resize_shorter;
      long nw, nh;
      if (W <= H) {
        nw = S;
        nh = static_cast<long>(static_cast<double>(S) * H / W);
      } else {
        nh = S;
        nw = static_cast<long>(static_cast<double>(S) * W / H);
      }
      const long oh = spec.out_height, ow = spec.out_width;
      const long top = pyround(static_cast<double>(nh - oh) / 2.0);
      const long left = pyround(static_cast<double>(nw - ow) / 2.0);
      const double sx = static_cast<double>(W) / nw, sy = static_cast<double>(H) / nh;
      plan.box = SourceBox{left * sx, top * sy, (left + ow) * sx, (top + oh) * sy,
                           0, 0, static_cast<double>(W), static_cast<double>(H)};
      plan.nearest_x = {0, sx, left};
      plan.nearest_y = {0, sy, top};
      break;
    }
    case Geometry::kResize:
      plan.box = integer_crop(0, 0, W, H);
      plan.nearest_x = {0, static_cast<double>(W) / static_cast<double>(spec.out_width), 0};
      plan.nearest_y = {0, static_cast<double>(H) / static_cast<double>(spec.out_height), 0};
      break;
  }
  // Drawn after the crop, so that turning flips on or off leaves every crop unchanged.
  plan.flip = spec.flip_probability > 0 && rng.uniform() < spec.flip_probability;
  return plan;
}

SourceBox to_stored(const SourceBox& u, int orientation, std::uint32_t width, std::uint32_t height) {
  const double W = width, H = height;
  // Axis transforms from upright to stored coordinates (see EXIF orientation table):
  // mirrored axes map [a0, a1) to [D - a1, D - a0).
  auto mx = [&](double a0, double a1, double& b0, double& b1) { b0 = W - a1; b1 = W - a0; };
  auto my = [&](double a0, double a1, double& b0, double& b1) { b0 = H - a1; b1 = H - a0; };
  SourceBox s = u;
  switch (orientation) {
    case 2:
      mx(u.x0, u.x1, s.x0, s.x1);
      mx(u.clip_x0, u.clip_x1, s.clip_x0, s.clip_x1);
      break;
    case 3:
      mx(u.x0, u.x1, s.x0, s.x1);
      mx(u.clip_x0, u.clip_x1, s.clip_x0, s.clip_x1);
      my(u.y0, u.y1, s.y0, s.y1);
      my(u.clip_y0, u.clip_y1, s.clip_y0, s.clip_y1);
      break;
    case 4:
      my(u.y0, u.y1, s.y0, s.y1);
      my(u.clip_y0, u.clip_y1, s.clip_y0, s.clip_y1);
      break;
    case 5:  // transpose: xs = yu, ys = xu
      s = SourceBox{u.y0, u.x0, u.y1, u.x1, u.clip_y0, u.clip_x0, u.clip_y1, u.clip_x1};
      break;
    case 6:  // rotate 90 CW to display: xs = yu, ys = H - xu
      s.x0 = u.y0; s.x1 = u.y1;
      s.clip_x0 = u.clip_y0; s.clip_x1 = u.clip_y1;
      my(u.x0, u.x1, s.y0, s.y1);
      my(u.clip_x0, u.clip_x1, s.clip_y0, s.clip_y1);
      break;
    case 7:  // transverse: xs = W - yu, ys = H - xu
      mx(u.y0, u.y1, s.x0, s.x1);
      mx(u.clip_y0, u.clip_y1, s.clip_x0, s.clip_x1);
      my(u.x0, u.x1, s.y0, s.y1);
      my(u.clip_x0, u.clip_x1, s.clip_y0, s.clip_y1);
      break;
    case 8:  // rotate 270 CW to display: xs = W - yu, ys = xu
      mx(u.y0, u.y1, s.x0, s.x1);
      mx(u.clip_y0, u.clip_y1, s.clip_x0, s.clip_x1);
      s.y0 = u.x0; s.y1 = u.x1;
      s.clip_y0 = u.clip_x0; s.clip_y1 = u.clip_x1;
      break;
    default:
      break;
  }
  return s;
}

}  // namespace stoker::image
