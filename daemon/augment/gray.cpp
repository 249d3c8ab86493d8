#include "augment/gray.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "augment/simd_level.hpp"

namespace stoker::augment {
namespace {

#if defined(__x86_64__)
// 8 pixels an iteration. Two 16-byte loads (pixels 0-3 and 4-7, each with 4 bytes more) form
// one register; a per-lane shuffle groups each lane's r, g, b bytes into dwords 0, 1, 2, and a
// dword permute puts r0-3 r4-7 g0-3 g4-7 in the low half and b0-3 b4-7 in the high half.
// Returns the pixels done (a multiple of 8); the last block stops 4 bytes before the end,
// which the second load reads past its 8 pixels.
__attribute__((target("avx2"))) std::size_t gray_values_avx2(const std::uint8_t* rgb, std::size_t pixels,
                                                             std::uint8_t* gray) {
  const __m256i group = _mm256_setr_epi8(0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11, -1, -1, -1, -1,  //
                                         0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11, -1, -1, -1, -1);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256 kr = _mm256_set1_ps(0.2989f), kg = _mm256_set1_ps(0.587f), kb = _mm256_set1_ps(0.114f);
  std::size_t i = 0;
  for (; (i + 8) * 3 + 4 <= pixels * 3; i += 8) {
    const std::uint8_t* p = rgb + 3 * i;
    const __m256i both = _mm256_setr_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)),
                                           _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 12)));
    const __m256i planes = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(both, group), order);
    const __m128i rg = _mm256_castsi256_si128(planes), b = _mm256_extracti128_si256(planes, 1);
    const __m256 r = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(rg));
    const __m256 g = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(rg, 8)));
    const __m256 bl = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
    const __m256 v = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(kr, r), _mm256_mul_ps(kg, g)), _mm256_mul_ps(kb, bl));
    // Within 0..255 (the weights sum to 0.9999), so truncation to int32 and packing are exact.
    const __m256i q = _mm256_cvttps_epi32(v);
    const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(gray + i), _mm_packus_epi16(words, words));
  }
  return i;
}
#endif

}  // namespace

void gray_values(const std::uint8_t* rgb, std::size_t pixels, std::uint8_t* gray) {
  std::size_t i = 0;
#if defined(__x86_64__)
  if (use_avx2()) i = gray_values_avx2(rgb, pixels, gray);
#endif
  for (; i < pixels; ++i) gray[i] = gray_of(rgb + 3 * i);
}

}  // namespace stoker::augment
