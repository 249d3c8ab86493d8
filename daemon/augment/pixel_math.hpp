// Rounding helpers for the pixel loops, inline and branch-free so the loops vectorise: on
// baseline x86-64 (SSE2, no SSE4.1 round instructions) std::nearbyint and std::floor are
// library calls, which cost more than the arithmetic around them.
#pragma once

#include <algorithm>
#include <cstdint>

namespace stoker::augment {

// Round half to even (torch.round, Python's round, nearbyint in the default rounding mode) for
// |v| < 2^22: adding 1.5 * 2^23 leaves no fraction bits, so the FPU's own round-to-nearest-even
// does the rounding. Outside that range the result stays far outside any pixel index or value
// range the callers test for; NaN stays NaN. Needs IEEE float32 arithmetic as written (no
// -ffast-math, which would fold the two operations away).
inline float round_half_even(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (v + kMagic) - kMagic;
}

// floor for |v| < 2^31.
inline float floor_small(float v) {
  const float t = static_cast<float>(static_cast<std::int32_t>(v));  // truncated towards 0
  return t > v ? t - 1.0f : t;
}

// torch.round(v).clamp(0, 255).to(uint8) for a finite v.
inline std::uint8_t round_to_u8(float v) {
  return static_cast<std::uint8_t>(static_cast<std::int32_t>(std::min(255.0f, std::max(0.0f, round_half_even(v)))));
}

// Leaves the AVX registers' upper halves clean before SSE code. A 256-bit routine that returns
// without vzeroupper (the JPEG decode + resample before the augment steps do: measured, an
// SSE blur then ran 4x slower, 1250 vs 340 us per 224x224 image) makes every later SSE
// instruction wait on the dirty upper state; vzeroupper clears it. A no-op without AVX.
inline void clear_avx_upper_state() {
#if defined(__x86_64__)
  static const bool has_avx = __builtin_cpu_supports("avx");
  if (has_avx) __asm__ volatile("vzeroupper");
#endif
}

}  // namespace stoker::augment
