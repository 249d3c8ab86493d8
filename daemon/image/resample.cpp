#include "image/resample.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

// row[x] = clip8(acc[x]) for x < len; acc is readable up to len rounded up to 16.
void clip_row(const std::int32_t* acc, int len, std::uint8_t* row) {
  int x = 0;
#if defined(__SSE2__)
  // Saturating packs do the clipping: int32 -> int16 (signed) -> uint8 (unsigned).
  for (; x + 16 <= len; x += 16) {
    const __m128i a = _mm_srai_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(acc + x)), kPrecisionBits);
    const __m128i b = _mm_srai_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(acc + x + 4)), kPrecisionBits);
    const __m128i c = _mm_srai_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(acc + x + 8)), kPrecisionBits);
    const __m128i d = _mm_srai_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(acc + x + 12)), kPrecisionBits);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(row + x),
                     _mm_packus_epi16(_mm_packs_epi32(a, b), _mm_packs_epi32(c, d)));
  }
#endif
  for (; x < len; ++x) row[x] = clip8(acc[x]);
}

// out row j = sum_k w[j][k] * in row (first[j] + k - row0), for rows of `len` bytes (RGB).
// Stored transposed: pixel p of row j lands at out + p * out_stride + j * 3, so the next pass
// reads the other axis as contiguous rows and no separate transpose pass is needed.
void vertical_pass_transposed(const std::uint8_t* in, std::ptrdiff_t in_stride, int row0, int len,
                              const AxisTaps& t, std::uint8_t* out, std::ptrdiff_t out_stride,
                              std::vector<std::int32_t>& acc_buf) {
  // acc holds `len` sums rounded up to a multiple of 16, then kBlock clipped rows.
  constexpr int kBlock = 4;  // output rows per scatter: 12 contiguous bytes per store site
  const std::size_t padded = (static_cast<std::size_t>(len) + 15) / 16 * 16;
  acc_buf.resize(padded + kBlock * padded / 4);
  std::int32_t* acc = acc_buf.data();
  std::uint8_t* rows = reinterpret_cast<std::uint8_t*>(acc + padded);
  constexpr std::int32_t kHalf = 1 << (kPrecisionBits - 1);
  const int n_out = static_cast<int>(t.first.size());
  for (int j0 = 0; j0 < n_out; j0 += kBlock) {
    const int nb = std::min(kBlock, n_out - j0);
    for (int b = 0; b < nb; ++b) {
      const int j = j0 + b;
      const std::int16_t* w = &t.weights[static_cast<std::size_t>(j) * t.taps];
      const std::uint8_t* line = in + static_cast<std::ptrdiff_t>(t.first[j] - row0) * in_stride;
      const int count = t.count[j];
      {
        const std::int32_t w0 = w[0];
        for (int x = 0; x < len; ++x) acc[x] = kHalf + line[x] * w0;
      }
      int k = 1;
      // Two taps per sweep halve the accumulator traffic.
      for (; k + 1 < count; k += 2) {
        const std::uint8_t* l0 = line + k * in_stride;
        const std::uint8_t* l1 = l0 + in_stride;
        const std::int16_t w0 = w[k], w1 = w[k + 1];
        for (int x = 0; x < len; ++x) acc[x] += std::int16_t(l0[x]) * w0 + std::int16_t(l1[x]) * w1;
      }
      if (k < count) {
        const std::uint8_t* l0 = line + k * in_stride;
        const std::int32_t w0 = w[k];
        for (int x = 0; x < len; ++x) acc[x] += l0[x] * w0;
      }
      clip_row(acc, len, rows + b * padded);
    }
    // Scatter the block transposed: pixel p of rows j0..j0+nb-1 -> nb*3 contiguous bytes.
    std::uint8_t* o = out + static_cast<std::ptrdiff_t>(j0) * 3;
    if (nb == kBlock) {
      const std::uint8_t* r0 = rows;
      const std::uint8_t* r1 = rows + padded;
      const std::uint8_t* r2 = rows + 2 * padded;
      const std::uint8_t* r3 = rows + 3 * padded;
      for (int x = 0; x < len; x += 3, o += out_stride) {
        std::uint8_t px[12] = {r0[x], r0[x + 1], r0[x + 2], r1[x], r1[x + 1], r1[x + 2],
                               r2[x], r2[x + 1], r2[x + 2], r3[x], r3[x + 1], r3[x + 2]};
        std::memcpy(o, px, 12);
      }
    } else {
      for (int b = 0; b < nb; ++b) {
        const std::uint8_t* r = rows + b * padded;
        std::uint8_t* ob = o + b * 3;
        for (int x = 0; x < len; x += 3, ob += out_stride) std::memcpy(ob, r + x, 3);
      }
    }
  }
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
    // Drop zero-weight taps at either end (they only cost time).
    int lo = 0, hi = n;
    while (lo < hi - 1 && k[lo] == 0) ++lo;
    while (hi - 1 > lo && k[hi - 1] == 0) --hi;
    for (int x = lo; x < hi; ++x) {
      const double v = k[x] / ww * (1 << kPrecisionBits);
      t.weights[static_cast<std::size_t>(i) * t.taps + (x - lo)] = static_cast<std::int16_t>(std::lround(v));
    }
    t.first[i] = xmin + lo;
    t.count[i] = hi - lo;
  }
}

void resample_rgb(const std::uint8_t* src, int stride, int win_x, int win_y, const AxisTaps& xt,
                  const AxisTaps& yt, std::uint8_t* dst, ResampleScratch& s) {
  const int out_w = static_cast<int>(xt.first.size());
  const int out_h = static_cast<int>(yt.first.size());
  const int x_lo = xt.lo(), x_hi = xt.hi();
  const int cols = x_hi - x_lo;  // source columns the horizontal filter reads
  // 1. Vertical over the window's rows; stored transposed: `cols` rows of out_h pixels.
  s.a.resize(static_cast<std::size_t>(out_h) * cols * 3);
  vertical_pass_transposed(src + static_cast<std::ptrdiff_t>(x_lo - win_x) * 3, stride, win_y, cols * 3,
                           yt, s.a.data(), static_cast<std::ptrdiff_t>(out_h) * 3, s.acc);
  // 2. Horizontal, as a vertical pass over those rows; transposed once more, which puts the
  //    result back in row-major order: pixel y of output column x lands at (y, x).
  vertical_pass_transposed(s.a.data(), static_cast<std::ptrdiff_t>(out_h) * 3, x_lo, out_h * 3, xt, dst,
                           static_cast<std::ptrdiff_t>(out_w) * 3, s.acc);
}

}  // namespace stoker::image
