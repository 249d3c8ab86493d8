// Argument helpers shared by stokerctl's commands.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>

namespace stoker::ctl {

// A whole non-negative decimal number that fits 64 bits; false for anything else ("-1", "3x").
inline bool parse_u64(const char* s, std::uint64_t& out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || s[0] == '-') return false;
  out = v;
  return true;
}

}  // namespace stoker::ctl
