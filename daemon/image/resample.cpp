#include "image/resample.hpp"

#include <algorithm>
#include <cmath>

namespace stoker::image {
namespace {

double triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

inline std::uint8_t clip8(std::int32_t v) {
  v >>= kPrecisionBits;
  return static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

}  // namespace

int AxisTaps::lo() const { return first.empty() ? 0 : *std::min_element(first.begin(), first.end()); }

int AxisTaps::hi() const {
  int h = 0;
  for (std::size_t i = 0; i < first.size(); ++i) h = std::max(h, first[i] + count[i]);
  return h;
}

void compute_taps(double box0, double box1, int out, int clip0, int clip1, AxisTaps& t) {
  const double scale = (box1 - box0) / out;
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  t.taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.assign(out, 0);
  t.count.assign(out, 0);
  t.weights.assign(static_cast<std::size_t>(out) * t.taps, 0);
  std::vector<double> k(t.taps);
  for (int i = 0; i < out; ++i) {
    const double center = box0 + (i + 0.5) * scale;
    // PIL's window: [int(center - support + 0.5), int(center + support + 0.5)) clipped.
    int xmin = static_cast<int>(center - support + 0.5);
    int xmax = static_cast<int>(center + support + 0.5);
    xmin = std::max(xmin, clip0);
    xmax = std::min(xmax, clip1);
    if (xmax <= xmin) {  // degenerate (tiny clip): take the nearest pixel
      xmin = std::clamp(static_cast<int>(center), clip0, clip1 - 1);
      xmax = xmin + 1;
    }
    int n = std::min(xmax - xmin, t.taps);
    double ww = 0;
    for (int x = 0; x < n; ++x) {
      k[x] = triangle((x + xmin - center + 0.5) / filterscale);
      ww += k[x];
    }
    if (ww == 0) {  // all weights zero at the clip edge: fall back to the nearest pixel
      k[0] = 1;
      n = 1;
      ww = 1;
    }
    for (int x = 0; x < n; ++x) {
      const double v = k[x] / ww * (1 << kPrecisionBits);
      t.weights[static_cast<std::size_t>(i) * t.taps + x] =
          static_cast<std::int32_t>(v < 0 ? v - 0.5 : v + 0.5);
    }
    t.first[i] = xmin;
    t.count[i] = n;
  }
}

void resample_rgb(const std::uint8_t* src, int stride, int win_x, int win_y, const AxisTaps& xt,
                  const AxisTaps& yt, std::uint8_t* dst, std::vector<std::uint8_t>& scratch) {
  const int out_w = static_cast<int>(xt.first.size());
  const int out_h = static_cast<int>(yt.first.size());
  const int y_lo = yt.lo(), y_hi = yt.hi();
  const int rows = y_hi - y_lo;
  scratch.resize(static_cast<std::size_t>(rows) * out_w * 3);
  constexpr std::int32_t kHalf = 1 << (kPrecisionBits - 1);

  // Horizontal pass over the rows the vertical pass needs.
  for (int r = 0; r < rows; ++r) {
    const std::uint8_t* line = src + static_cast<std::ptrdiff_t>(y_lo + r - win_y) * stride;
    std::uint8_t* o = scratch.data() + static_cast<std::size_t>(r) * out_w * 3;
    for (int i = 0; i < out_w; ++i) {
      const std::int32_t* w = &xt.weights[static_cast<std::size_t>(i) * xt.taps];
      const std::uint8_t* p = line + (xt.first[i] - win_x) * 3;
      std::int32_t s0 = kHalf, s1 = kHalf, s2 = kHalf;
      for (int k = 0; k < xt.count[i]; ++k) {
        s0 += p[3 * k] * w[k];
        s1 += p[3 * k + 1] * w[k];
        s2 += p[3 * k + 2] * w[k];
      }
      o[3 * i] = clip8(s0);
      o[3 * i + 1] = clip8(s1);
      o[3 * i + 2] = clip8(s2);
    }
  }
  // Vertical pass: whole rows at a time so the inner loop runs along contiguous memory.
  const int row_len = out_w * 3;
  std::vector<std::int32_t> acc(row_len);
  for (int j = 0; j < out_h; ++j) {
    const std::int32_t* w = &yt.weights[static_cast<std::size_t>(j) * yt.taps];
    std::fill(acc.begin(), acc.end(), kHalf);
    for (int k = 0; k < yt.count[j]; ++k) {
      const std::uint8_t* line = scratch.data() + static_cast<std::size_t>(yt.first[j] + k - y_lo) * row_len;
      const std::int32_t wk = w[k];
      for (int x = 0; x < row_len; ++x) acc[x] += line[x] * wk;
    }
    std::uint8_t* o = dst + static_cast<std::size_t>(j) * row_len;
    for (int x = 0; x < row_len; ++x) o[x] = clip8(acc[x]);
  }
}

}  // namespace stoker::image
