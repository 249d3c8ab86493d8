#include "augment/warp_avx2.hpp"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace stoker::augment {

#if defined(__x86_64__)

namespace {

// Channel `shift / 8` of eight gathered little-endian pixels, as floats.
__attribute__((target("avx2"))) inline __m256 gathered_channel(__m256i px, int shift) {
  return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(px, _mm256_set1_epi32(shift)), _mm256_set1_epi32(0xff)));
}

// round_to_u8 (pixel_math.hpp) lane by lane, as int32 0..255.
__attribute__((target("avx2"))) inline __m256i round_to_u8_lanes(__m256 v) {
  const __m256 magic = _mm256_set1_ps(12582912.0f);  // 1.5 * 2^23: round half to even
  v = _mm256_sub_ps(_mm256_add_ps(v, magic), magic);
  v = _mm256_min_ps(_mm256_set1_ps(255.0f), _mm256_max_ps(_mm256_setzero_ps(), v));
  return _mm256_cvttps_epi32(v);
}

}  // namespace

__attribute__((target("avx2"))) void bilinear_row_avx2(const std::uint8_t* src, int width, int height, const float* ix,
                                                       const float* iy, int count, const std::array<float, 3>* fill,
                                                       std::uint8_t* out, std::uint8_t* done) {
  const auto* base = reinterpret_cast<const int*>(src);
  const __m256i row = _mm256_set1_epi32(width * 3);
  const __m256i three = _mm256_set1_epi32(3);
  // xi + 1 < width and yi + 1 < height: xi <= width - 2, yi <= height - 2.
  const __m256i x_last = _mm256_set1_epi32(width - 2), y_last = _mm256_set1_epi32(height - 2);
  const __m256i zero_i = _mm256_setzero_si256();
  const __m256 one = _mm256_set1_ps(1.0f);
  // Four pixels' low three bytes to the front of each 128-bit lane.
  const __m256i pack = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1,  //
                                        0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  __m256 f[3] = {};
  if (fill) {
    for (int c = 0; c < 3; ++c) f[c] = _mm256_set1_ps((*fill)[c]);
  }
  for (int b = 0; 8 * b + 8 <= count; ++b) {
    const int j = 8 * b;
    const __m256 x = _mm256_loadu_ps(ix + j), y = _mm256_loadu_ps(iy + j);
    const __m256 x0 = _mm256_floor_ps(x), y0 = _mm256_floor_ps(y);
    // NaN and values beyond int32 convert to INT_MIN, which the test below sends to the scalar path.
    const __m256i xi = _mm256_cvttps_epi32(x0), yi = _mm256_cvttps_epi32(y0);
    const __m256i outside = _mm256_or_si256(
        _mm256_or_si256(_mm256_cmpgt_epi32(zero_i, xi), _mm256_cmpgt_epi32(xi, x_last)),
        _mm256_or_si256(_mm256_cmpgt_epi32(zero_i, yi), _mm256_cmpgt_epi32(yi, y_last)));
    if (!_mm256_testz_si256(outside, outside)) {
      done[b] = 0;
      continue;
    }
    const __m256 fe = _mm256_sub_ps(x, x0), fs = _mm256_sub_ps(y, y0);
    const __m256 fw = _mm256_sub_ps(one, fe), fn = _mm256_sub_ps(one, fs);
    const __m256 w_nw = _mm256_mul_ps(fn, fw), w_ne = _mm256_mul_ps(fn, fe);
    const __m256 w_sw = _mm256_mul_ps(fs, fw), w_se = _mm256_mul_ps(fs, fe);
    const __m256i o = _mm256_add_epi32(_mm256_mullo_epi32(yi, row), _mm256_mullo_epi32(xi, three));
    const __m256i nw = _mm256_i32gather_epi32(base, o, 1);
    const __m256i ne = _mm256_i32gather_epi32(base, _mm256_add_epi32(o, three), 1);
    const __m256i o_s = _mm256_add_epi32(o, row);
    const __m256i sw = _mm256_i32gather_epi32(base, o_s, 1);
    const __m256i se = _mm256_i32gather_epi32(base, _mm256_add_epi32(o_s, three), 1);
    __m256 m = one;
    if (fill) m = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(w_nw, w_ne), w_sw), w_se);
    __m256i word = zero_i;
    for (int c = 0; c < 3; ++c) {
      __m256 acc = _mm256_mul_ps(gathered_channel(nw, 8 * c), w_nw);
      acc = _mm256_add_ps(acc, _mm256_mul_ps(gathered_channel(ne, 8 * c), w_ne));
      acc = _mm256_add_ps(acc, _mm256_mul_ps(gathered_channel(sw, 8 * c), w_sw));
      acc = _mm256_add_ps(acc, _mm256_mul_ps(gathered_channel(se, 8 * c), w_se));
      if (fill) acc = _mm256_add_ps(_mm256_mul_ps(acc, m), _mm256_mul_ps(_mm256_sub_ps(one, m), f[c]));
      word = _mm256_or_si256(word, _mm256_slli_epi32(round_to_u8_lanes(acc), 8 * c));
    }
    alignas(32) std::uint8_t packed[32];
    _mm256_store_si256(reinterpret_cast<__m256i*>(packed), _mm256_shuffle_epi8(word, pack));
    std::memcpy(out + 3 * j, packed, 12);
    std::memcpy(out + 3 * j + 12, packed + 16, 12);
    done[b] = 1;
  }
}

#else

void bilinear_row_avx2(const std::uint8_t*, int, int, const float*, const float*, int count,
                       const std::array<float, 3>*, std::uint8_t*, std::uint8_t* done) {
  for (int b = 0; 8 * b + 8 <= count; ++b) done[b] = 0;  // never chosen: use_avx2() is false
}

#endif

}  // namespace stoker::augment
