// adjust_sharpness (declared in color_ops.hpp): torchvision 0.14's _blend(img, degenerate,
// factor), degenerate being the image smoothed by [1 1 1; 1 5 1; 1 1 1] / 13 in float32,
// rounded to uint8 inside a one-pixel border that keeps the original pixels.
//
// One pass per row, the smoothing fused with the blend: the nine taps of a value summed in
// torch's order (rows top to bottom, columns left to right), rounded to uint8 as the
// degenerate image holds it, then blended with the original value. The source rows are the
// original pixels as float in a ring of three rows, so each row is converted once and can be
// overwritten as soon as the row below it has been read. The row kernel is written for SSE2
// and for AVX2 (simd_level.hpp) beside its scalar tail: the same expressions, only wider, so
// the same bytes.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "augment/color_ops.hpp"
#include "augment/pixel_math.hpp"
#include "augment/simd_level.hpp"

namespace stoker::augment {
namespace {

// `.clamp(0, 255).to(torch.uint8)` of a float32, as float (0..255, integral): clamp, truncate.
inline float clamp_truncate(float v) {
  return static_cast<float>(static_cast<std::int32_t>(std::min(255.0f, std::max(0.0f, v))));
}

struct SharpenArgs {
  const float* up;    // the original values of rows y - 1, y, y + 1, as float
  const float* mid;
  const float* down;
  std::size_t n;      // values of columns 1 .. width - 2: row - 6
  float r, s;         // the blend's factor and 1 - factor, each rounded to float32 once
  std::uint8_t* out;  // row y's value of column 1
};

// Row y's inside values from `i` on, one value at a time (the vector versions' tail). Sums
// start from the first product rather than from 0: the same value, since every product is
// >= 0 (0 + x == x but for x == -0).
void sharpen_row_scalar(const SharpenArgs& a, std::size_t i) {
  const float k_side = 1.0f / 13.0f, k_mid = 5.0f / 13.0f;
  for (; i < a.n; ++i) {
    float acc = a.up[i] * k_side;
    acc += a.up[i + 3] * k_side;
    acc += a.up[i + 6] * k_side;
    acc += a.mid[i] * k_side;
    acc += a.mid[i + 3] * k_mid;
    acc += a.mid[i + 6] * k_side;
    acc += a.down[i] * k_side;
    acc += a.down[i + 3] * k_side;
    acc += a.down[i + 6] * k_side;
    // The degenerate image's uint8 value (round, clamp), as float: exact.
    const float degenerate = std::min(255.0f, std::max(0.0f, round_half_even(acc)));
    const float x = a.r * a.mid[i + 3];
    const float y = a.s * degenerate;
    a.out[i] = static_cast<std::uint8_t>(static_cast<std::int32_t>(clamp_truncate(x + y)));
  }
}

#if defined(__SSE2__)
// The same expressions, 4 values an instruction (the compiler does not vectorise the scalar
// loop: it keeps the clamps' branches). min/max differ from std::min/max only for NaN, which
// no sum of pixel values is.
void sharpen_row_sse2(const SharpenArgs& a) {
  const __m128 k_side = _mm_set1_ps(1.0f / 13.0f), k_mid = _mm_set1_ps(5.0f / 13.0f);
  const __m128 magic = _mm_set1_ps(12582912.0f), zero = _mm_setzero_ps(), top = _mm_set1_ps(255.0f);
  const __m128 r = _mm_set1_ps(a.r), s = _mm_set1_ps(a.s);
  std::size_t i = 0;
  for (; i + 4 <= a.n; i += 4) {
    __m128 acc = _mm_mul_ps(_mm_loadu_ps(a.up + i), k_side);
    acc = _mm_add_ps(acc, _mm_mul_ps(_mm_loadu_ps(a.up + i + 3), k_side));
    acc = _mm_add_ps(acc, _mm_mul_ps(_mm_loadu_ps(a.up + i + 6), k_side));
    acc = _mm_add_ps(acc, _mm_mul_ps(_mm_loadu_ps(a.mid + i), k_side));
    acc = _mm_add_ps(acc, _mm_mul_ps(_mm_loadu_ps(a.mid + i + 3), k_mid));
    acc = _mm_add_ps(acc, _mm_mul_ps(_mm_loadu_ps(a.mid + i + 6), k_side));
    acc = _mm_add_ps(acc, _mm_mul_ps(_mm_loadu_ps(a.down + i), k_side));
    acc = _mm_add_ps(acc, _mm_mul_ps(_mm_loadu_ps(a.down + i + 3), k_side));
    acc = _mm_add_ps(acc, _mm_mul_ps(_mm_loadu_ps(a.down + i + 6), k_side));
    const __m128 degenerate = _mm_min_ps(top, _mm_max_ps(zero, _mm_sub_ps(_mm_add_ps(acc, magic), magic)));
    const __m128 v = _mm_add_ps(_mm_mul_ps(r, _mm_loadu_ps(a.mid + i + 3)), _mm_mul_ps(s, degenerate));
    const __m128i q = _mm_cvttps_epi32(_mm_min_ps(top, _mm_max_ps(zero, v)));
    const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(q, q), q);
    const std::int32_t word = _mm_cvtsi128_si32(bytes);
    std::memcpy(a.out + i, &word, 4);
  }
  sharpen_row_scalar(a, i);
}
#else
void sharpen_row_sse2(const SharpenArgs& a) { sharpen_row_scalar(a, 0); }
#endif

#if defined(__x86_64__)
// sharpen_row_sse2, 8 values an instruction.
__attribute__((target("avx2"))) void sharpen_row_avx2(const SharpenArgs& a) {
  const __m256 k_side = _mm256_set1_ps(1.0f / 13.0f), k_mid = _mm256_set1_ps(5.0f / 13.0f);
  const __m256 magic = _mm256_set1_ps(12582912.0f), zero = _mm256_setzero_ps(), top = _mm256_set1_ps(255.0f);
  const __m256 r = _mm256_set1_ps(a.r), s = _mm256_set1_ps(a.s);
  std::size_t i = 0;
  for (; i + 8 <= a.n; i += 8) {
    __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(a.up + i), k_side);
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a.up + i + 3), k_side));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a.up + i + 6), k_side));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a.mid + i), k_side));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a.mid + i + 3), k_mid));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a.mid + i + 6), k_side));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a.down + i), k_side));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a.down + i + 3), k_side));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a.down + i + 6), k_side));
    const __m256 degenerate =
        _mm256_min_ps(top, _mm256_max_ps(zero, _mm256_sub_ps(_mm256_add_ps(acc, magic), magic)));
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(r, _mm256_loadu_ps(a.mid + i + 3)), _mm256_mul_ps(s, degenerate));
    const __m256i q = _mm256_cvttps_epi32(_mm256_min_ps(top, _mm256_max_ps(zero, v)));
    const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(a.out + i), _mm_packus_epi16(words, words));
  }
  sharpen_row_scalar(a, i);
}
#endif

// _blend(v, v) of values whose degenerate value is the original (the border): not always v,
// since r * v + (1 - r) * v rounds in float32 before the truncation.
void blend_with_itself(std::uint8_t* p, std::size_t n, float r, float s) {
  for (std::size_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(p[i]);
    const float x = r * v;
    const float y = s * v;
    p[i] = static_cast<std::uint8_t>(static_cast<std::int32_t>(clamp_truncate(x + y)));
  }
}

void to_float(const std::uint8_t* p, std::size_t n, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]);
}

}  // namespace

void adjust_sharpness(std::uint8_t* rgb, int width, int height, double factor) {
  if (width <= 2 || height <= 2) return;  // torchvision: nothing inside the border to blur
  const std::size_t row = std::size_t(width) * 3;
  const float r = static_cast<float>(factor), s = static_cast<float>(1.0 - factor);
  auto* const kernel =
#if defined(__x86_64__)
      use_avx2() ? sharpen_row_avx2 :
#endif
                 sharpen_row_sse2;
  // Ring of the original rows y - 1, y, y + 1 as float; row y + 1 is converted before row y is
  // overwritten, so every tap reads original values.
  thread_local std::vector<float> ring;
  ring.resize(3 * row);
  auto ring_row = [&](int y) { return ring.data() + row * static_cast<std::size_t>(y % 3); };
  to_float(rgb, row, ring_row(0));
  to_float(rgb + row, row, ring_row(1));
  blend_with_itself(rgb, row, r, s);  // row 0: border
  for (int y = 1; y < height - 1; ++y) {
    std::uint8_t* const line = rgb + row * y;
    to_float(line + row, row, ring_row(y + 1));
    kernel({ring_row(y - 1), ring_row(y), ring_row(y + 1), row - 6, r, s, line + 3});
    blend_with_itself(line, 3, r, s);            // column 0
    blend_with_itself(line + row - 3, 3, r, s);  // column width - 1
  }
  blend_with_itself(rgb + row * (height - 1), row, r, s);  // row height - 1: border
}

}  // namespace stoker::augment
