// A 64-bit checksum for the decoded store's entries: four independent multiply-rotate lanes
// over 8-byte words (the structure of XXH64's rounds), so it runs near memory speed on the
// ~300 KB of pixels an entry holds. It guards against torn writes and scribbled bytes, not
// against an adversary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace stoker::store {

inline std::uint64_t checksum64(const void* data, std::size_t n, std::uint64_t seed = 0) {
  constexpr std::uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full, kP3 = 0x165667B19E3779F9ull;
  auto rotl = [](std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); };
  auto round = [&](std::uint64_t acc, std::uint64_t w) { return rotl(acc + w * kP2, 31) * kP1; };
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::uint64_t a = seed + kP1 + kP2, b = seed + kP2, c = seed, d = seed - kP1;
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    std::uint64_t w[4];
    std::memcpy(w, p + i, 32);
    a = round(a, w[0]);
    b = round(b, w[1]);
    c = round(c, w[2]);
    d = round(d, w[3]);
  }
  std::uint64_t h = rotl(a, 1) + rotl(b, 7) + rotl(c, 12) + rotl(d, 18) + n;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = rotl(h ^ round(0, w), 27) * kP1 + kP3;
  }
  for (; i < n; ++i) h = rotl(h ^ (p[i] * kP3), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

}  // namespace stoker::store
