// IEEE 754 binary16 <-> float32: the float16 the segment's batches hold (output dtype float16,
// float16 soft labels). float_to_half rounds to nearest even and is the one conversion every
// float16 write of the daemon uses (the output writer's tables, erasing, mixing), so they agree
// bit for bit; half_to_float is exact. Header-only, shared by the daemon and the clients.
#pragma once

#include <cstdint>
#include <cstring>

namespace stoker {

inline std::uint16_t float_to_half(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  if (absx >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absx < 0x38800000u) {  // subnormal half
    if (absx < 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    const int shift = 113 - static_cast<int>(absx >> 23) + 13;
    std::uint32_t v = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (v & 1))) ++v;
    return static_cast<std::uint16_t>(sign | v);
  }
  std::uint32_t v = ((absx - 0x38000000u) >> 13);
  const std::uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (v & 1))) ++v;
  return static_cast<std::uint16_t>(sign | v);
}

// float32 from IEEE 754 binary16, exact (every half is a float): what a reader of float16
// batches (the mixer, stokerctl's --ids and preview) needs.
inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace stoker
