#include "image/resample.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define STOKER_RESAMPLE_AVX2 1
#endif

namespace stoker::image {
namespace {

double triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// PIL's bicubic_filter (Keys' cubic convolution with a = -0.5), support 2.
double bicubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

static_assert(std::endian::native == std::endian::little, "the scatter packs bytes little-endian");

inline std::uint32_t load_u32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline std::uint8_t clip8(std::int32_t v) {
  v >>= kPrecisionBits;
  return static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// out[x] = clip8(sum_k w[k] * line[k * stride + x]) for x < len. `acc` is scratch of at least
// len rounded up to 16 ints (used by the scalar tail only).
// Pixels before `x` are already done (by a wider SIMD variant).
void filter_row(const std::uint8_t* line, std::ptrdiff_t stride, const std::int16_t* w, int count,
                int len, std::int32_t* acc, std::uint8_t* out, int x = 0) {
  constexpr std::int32_t kHalf = 1 << (kPrecisionBits - 1);
#if defined(__SSE2__)
  // 16 bytes at a time with the accumulators in registers across all taps; taps go in pairs
  // through pmaddwd: (a*w0 + b*w1) for interleaved 16-bit (a, b).
  const __m128i zero = _mm_setzero_si128();
  const __m128i half = _mm_set1_epi32(kHalf);
  for (; x + 16 <= len; x += 16) {
    __m128i s0 = half, s1 = half, s2 = half, s3 = half;
    for (int k = 0; k < count; k += 2) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(line + k * stride + x));
      const bool pair = k + 1 < count;
      const __m128i b = pair ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(line + (k + 1) * stride + x)) : zero;
      const std::int32_t w1 = pair ? w[k + 1] : 0;
      const __m128i wv = _mm_set1_epi32(static_cast<std::int32_t>((static_cast<std::uint32_t>(w1) << 16) |
                                                                  static_cast<std::uint16_t>(w[k])));
      const __m128i lo = _mm_unpacklo_epi8(a, b);
      const __m128i hi = _mm_unpackhi_epi8(a, b);
      s0 = _mm_add_epi32(s0, _mm_madd_epi16(_mm_unpacklo_epi8(lo, zero), wv));
      s1 = _mm_add_epi32(s1, _mm_madd_epi16(_mm_unpackhi_epi8(lo, zero), wv));
      s2 = _mm_add_epi32(s2, _mm_madd_epi16(_mm_unpacklo_epi8(hi, zero), wv));
      s3 = _mm_add_epi32(s3, _mm_madd_epi16(_mm_unpackhi_epi8(hi, zero), wv));
    }
    s0 = _mm_srai_epi32(s0, kPrecisionBits);
    s1 = _mm_srai_epi32(s1, kPrecisionBits);
    s2 = _mm_srai_epi32(s2, kPrecisionBits);
    s3 = _mm_srai_epi32(s3, kPrecisionBits);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + x),
                     _mm_packus_epi16(_mm_packs_epi32(s0, s1), _mm_packs_epi32(s2, s3)));
  }
#endif
  if (x < len) {
    for (int i = x; i < len; ++i) acc[i] = kHalf;
    for (int k = 0; k < count; ++k) {
      const std::uint8_t* l = line + k * stride;
      const std::int32_t wk = w[k];
      for (int i = x; i < len; ++i) acc[i] += l[i] * wk;
    }
    for (int i = x; i < len; ++i) out[i] = clip8(acc[i]);
  }
}

#if defined(STOKER_RESAMPLE_AVX2)
// filter_row 32 bytes at a time, for CPUs with AVX2 (chosen at run time: the build targets
// baseline x86-64). Same arithmetic, so results are bit-identical to filter_row.
__attribute__((target("avx2"))) void filter_row_avx2(const std::uint8_t* line, std::ptrdiff_t stride,
                                                     const std::int16_t* w, int count, int len,
                                                     std::int32_t* acc, std::uint8_t* out) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i half = _mm256_set1_epi32(1 << (kPrecisionBits - 1));
  int x = 0;
  for (; x + 32 <= len; x += 32) {
    __m256i s0 = half, s1 = half, s2 = half, s3 = half;
    for (int k = 0; k < count; k += 2) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line + k * stride + x));
      const bool pair = k + 1 < count;
      const __m256i b =
          pair ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line + (k + 1) * stride + x)) : zero;
      const std::int32_t w1 = pair ? w[k + 1] : 0;
      const __m256i wv = _mm256_set1_epi32(static_cast<std::int32_t>((static_cast<std::uint32_t>(w1) << 16) |
                                                                     static_cast<std::uint16_t>(w[k])));
      // Unpacks work per 128-bit lane; the packs below undo the same lane split, so the
      // bytes come out in order.
      const __m256i lo = _mm256_unpacklo_epi8(a, b);
      const __m256i hi = _mm256_unpackhi_epi8(a, b);
      s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_unpacklo_epi8(lo, zero), wv));
      s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_unpackhi_epi8(lo, zero), wv));
      s2 = _mm256_add_epi32(s2, _mm256_madd_epi16(_mm256_unpacklo_epi8(hi, zero), wv));
      s3 = _mm256_add_epi32(s3, _mm256_madd_epi16(_mm256_unpackhi_epi8(hi, zero), wv));
    }
    s0 = _mm256_srai_epi32(s0, kPrecisionBits);
    s1 = _mm256_srai_epi32(s1, kPrecisionBits);
    s2 = _mm256_srai_epi32(s2, kPrecisionBits);
    s3 = _mm256_srai_epi32(s3, kPrecisionBits);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + x),
                        _mm256_packus_epi16(_mm256_packs_epi32(s0, s1), _mm256_packs_epi32(s2, s3)));
  }
  filter_row(line, stride, w, count, len, acc, out, x);
}
#endif

using FilterRow = void (*)(const std::uint8_t*, std::ptrdiff_t, const std::int16_t*, int, int,
                           std::int32_t*, std::uint8_t*);

FilterRow pick_filter_row() {
#if defined(STOKER_RESAMPLE_AVX2)
  __builtin_cpu_init();  // this runs from a static initializer, possibly before libgcc's
  if (__builtin_cpu_supports("avx2")) return filter_row_avx2;
#endif
  return [](const std::uint8_t* line, std::ptrdiff_t stride, const std::int16_t* w, int count, int len,
            std::int32_t* acc, std::uint8_t* out) { filter_row(line, stride, w, count, len, acc, out); };
}

const FilterRow kFilterRow = pick_filter_row();

// out row j = sum_k w[j][k] * in row (first[j] + k - row0), for rows of `len` bytes (RGB).
// Stored transposed: pixel p of row j lands at out + p * out_stride + j * 3, so the next pass
// reads the other axis as contiguous rows and no separate transpose pass is needed.
void vertical_pass_transposed(const std::uint8_t* in, std::ptrdiff_t in_stride, int row0, int len,
                              const AxisTaps& t, std::uint8_t* out, std::ptrdiff_t out_stride,
                              std::vector<std::int32_t>& acc_buf) {
  // acc holds `len` sums rounded up to a multiple of 16, then kBlock clipped rows.
  constexpr int kBlock = 4;  // output rows per scatter: 12 contiguous bytes per store site
  const std::size_t padded = (static_cast<std::size_t>(len) + 15) / 16 * 16;
  // The scatter's 4-byte loads read up to one byte past a row's `len` bytes: kSlack keeps
  // the last row's overread inside the buffer.
  constexpr std::size_t kSlack = 16;
  acc_buf.resize(padded + (kBlock * padded + kSlack) / 4);
  std::int32_t* acc = acc_buf.data();
  std::uint8_t* rows = reinterpret_cast<std::uint8_t*>(acc + padded);
  const int n_out = static_cast<int>(t.first.size());
  for (int j0 = 0; j0 < n_out; j0 += kBlock) {
    const int nb = std::min(kBlock, n_out - j0);
    for (int b = 0; b < nb; ++b) {
      const int j = j0 + b;
      const std::uint8_t* line = in + static_cast<std::ptrdiff_t>(t.first[j] - row0) * in_stride;
      kFilterRow(line, in_stride, &t.weights[static_cast<std::size_t>(j) * t.taps], t.count[j], len, acc,
                 rows + b * padded);
    }
    // Scatter the block transposed: pixel p of rows j0..j0+nb-1 -> nb*3 contiguous bytes.
    std::uint8_t* o = out + static_cast<std::ptrdiff_t>(j0) * 3;
    if (nb == kBlock) {
      const std::uint8_t* r0 = rows;
      const std::uint8_t* r1 = rows + padded;
      const std::uint8_t* r2 = rows + 2 * padded;
      const std::uint8_t* r3 = rows + 3 * padded;
      // One 4-byte load per (row, pixel) instead of three byte loads; the fourth byte is the
      // next pixel's (or slack, see kSlack) and is shifted out. Little-endian byte order.
      for (int x = 0; x < len; x += 3, o += out_stride) {
        const std::uint64_t a = load_u32(r0 + x) & 0xffffffu, b = load_u32(r1 + x) & 0xffffffu;
        const std::uint64_t c = load_u32(r2 + x) & 0xffffffu, d = load_u32(r3 + x) & 0xffffffu;
        const std::uint64_t lo = a | (b << 24) | (c << 48);
        const std::uint32_t hi = static_cast<std::uint32_t>((c >> 16) | (d << 8));
        std::memcpy(o, &lo, 8);
        std::memcpy(o + 8, &hi, 4);
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

void compute_taps(double box0, double box1, int out, int clip0, int clip1, AxisTaps& t, ResizeFilter filter) {
  const bool cubic = filter == ResizeFilter::kBicubic;
  double (*const kernel)(double) = cubic ? bicubic : triangle;
  const double scale = (box1 - box0) / out;
  const double filterscale = std::max(scale, 1.0);
  const double support = (cubic ? 2.0 : 1.0) * filterscale;
  t.taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.assign(out, 0);
  t.count.assign(out, 0);
  t.weights.assign(static_cast<std::size_t>(out) * t.taps, 0);
  t.weights22.assign(static_cast<std::size_t>(out) * t.taps, 0);
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
      k[x] = kernel((x + xmin - center + 0.5) / filterscale);
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
      // PIL: (int)(w * (1 << PRECISION_BITS) + 0.5) for w >= 0, (int)(w * ... - 0.5) below.
      const double v22 = k[x] / ww * (1 << kPilPrecisionBits);
      t.weights22[static_cast<std::size_t>(i) * t.taps + (x - lo)] =
          static_cast<std::int32_t>(v22 < 0 ? v22 - 0.5 : v22 + 0.5);
    }
    t.first[i] = xmin + lo;
    t.count[i] = hi - lo;
  }
}

void nearest_taps(const NearestAxis& a, int out, int size, bool mirrored, AxisTaps& t) {
  t.taps = 1;
  t.first.assign(out, 0);
  t.count.assign(out, 1);
  t.weights.assign(static_cast<std::size_t>(out), static_cast<std::int16_t>(1 << kPrecisionBits));
  t.weights22.assign(static_cast<std::size_t>(out), 1 << kPilPrecisionBits);
  // Summed, not multiplied: PIL accumulates, and at exact halves (step 2, 1.5...) the sum and
  // the product may fall on either side of an integer.
  double x = a.step * 0.5;
  for (long j = 0; j < a.skip; ++j) x += a.step;
  for (int i = 0; i < out; ++i, x += a.step) {
    const long u = std::clamp<long>(a.origin + (x < 0.0 ? -1 : static_cast<long>(x)), 0, size - 1);
    if (mirrored) {
      t.first[out - 1 - i] = static_cast<int>(size - 1 - u);
    } else {
      t.first[i] = static_cast<int>(u);
    }
  }
}

namespace {

// PIL's pass order and precision, horizontal then vertical, for filters with negative lobes
// (bicubic): each pass clips to 0..255, so the order decides which overshoots are cut (vertical
// first gave values up to 5 levels off PIL's at sharp edges), and 22-bit weights keep the first
// pass's rounding PIL's. Plain loops: the horizontal pass gathers interleaved RGB per tap; the
// vertical one runs along contiguous rows (the compiler vectorizes it).
inline std::uint8_t clip8_22(std::int32_t v) {
  v >>= kPilPrecisionBits;
  return static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

void resample_rgb_horizontal_first(const std::uint8_t* src, int stride, int win_x, int win_y, const AxisTaps& xt,
                                   const AxisTaps& yt, std::uint8_t* dst, ResampleScratch& s) {
  constexpr std::int32_t kHalf = 1 << (kPilPrecisionBits - 1);
  const int out_w = static_cast<int>(xt.first.size());
  const int out_h = static_cast<int>(yt.first.size());
  const int y_lo = yt.lo(), rows = yt.hi() - y_lo;
  const std::ptrdiff_t row_bytes = static_cast<std::ptrdiff_t>(out_w) * 3;
  s.a.resize(static_cast<std::size_t>(rows) * row_bytes);
  for (int r = 0; r < rows; ++r) {
    const std::uint8_t* line = src + static_cast<std::ptrdiff_t>(y_lo + r - win_y) * stride;
    std::uint8_t* o = s.a.data() + r * row_bytes;
    for (int i = 0; i < out_w; ++i) {
      const std::int32_t* w = &xt.weights22[static_cast<std::size_t>(i) * xt.taps];
      const std::uint8_t* p = line + static_cast<std::ptrdiff_t>(xt.first[i] - win_x) * 3;
      std::int32_t r0 = kHalf, g0 = kHalf, b0 = kHalf;
      for (int k = 0; k < xt.count[i]; ++k, p += 3) {
        r0 += p[0] * w[k];
        g0 += p[1] * w[k];
        b0 += p[2] * w[k];
      }
      o[3 * i] = clip8_22(r0);
      o[3 * i + 1] = clip8_22(g0);
      o[3 * i + 2] = clip8_22(b0);
    }
  }
  s.acc.resize(static_cast<std::size_t>(row_bytes));
  std::int32_t* acc = s.acc.data();
  for (int j = 0; j < out_h; ++j) {
    const std::int32_t* w = &yt.weights22[static_cast<std::size_t>(j) * yt.taps];
    for (std::ptrdiff_t x = 0; x < row_bytes; ++x) acc[x] = kHalf;
    for (int k = 0; k < yt.count[j]; ++k) {
      const std::uint8_t* l = s.a.data() + (yt.first[j] + k - y_lo) * row_bytes;
      const std::int32_t wk = w[k];
      for (std::ptrdiff_t x = 0; x < row_bytes; ++x) acc[x] += l[x] * wk;
    }
    std::uint8_t* o = dst + j * row_bytes;
    for (std::ptrdiff_t x = 0; x < row_bytes; ++x) o[x] = clip8_22(acc[x]);
  }
}

}  // namespace

void resample_rgb(const std::uint8_t* src, int stride, int win_x, int win_y, const AxisTaps& xt,
                  const AxisTaps& yt, std::uint8_t* dst, ResampleScratch& s, bool horizontal_first) {
  if (horizontal_first) {
    resample_rgb_horizontal_first(src, stride, win_x, win_y, xt, yt, dst, s);
    return;
  }
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
