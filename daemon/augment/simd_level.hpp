// Which vector width the augment ops may use, decided once from the CPU (the build targets
// baseline x86-64, so SSE2 is all that is certain; AVX2 paths are compiled per function with
// __attribute__((target("avx2"))) and chosen here at run time, as image/resample.cpp does).
// Every SIMD path computes the same float32 expressions in the same order as its scalar
// twin, so the choice never changes a pixel; tests force the scalar path to check exactly that.
#pragma once

namespace stoker::augment {

// True when the CPU has AVX2 and the scalar path is not forced.
bool use_avx2();

// Tests only: with `on`, every op takes its SSE2/scalar path even on an AVX2 CPU (process-wide).
void force_scalar_for_tests(bool on);

}  // namespace stoker::augment
