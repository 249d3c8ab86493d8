#include "augment/simd_level.hpp"

#include <atomic>

namespace stoker::augment {
namespace {

bool cpu_has_avx2() {
#if defined(__x86_64__)
  __builtin_cpu_init();  // may run before libgcc's own initialiser
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

std::atomic<bool> g_forced_scalar{false};

}  // namespace

bool use_avx2() {
  static const bool has = cpu_has_avx2();  // a function-local static: safe from other initialisers
  return has && !g_forced_scalar.load(std::memory_order_relaxed);
}

void force_scalar_for_tests(bool on) { g_forced_scalar.store(on, std::memory_order_relaxed); }

}  // namespace stoker::augment
