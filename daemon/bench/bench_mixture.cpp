// Benchmark (not a test): what planning an epoch of a mixture (sampler/mixture.hpp) costs
// against one permutation of as many samples, once per rank and epoch as Job::epoch_ids runs
// it. Prints one line per case: name, samples, ms per epoch, ns per sample.
//   build/bin/stoker_bench_mixture [large=1281167] [small=64] [reps=5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "sampler/mixture.hpp"
#include "sampler/sampler.hpp"

using namespace stoker::sampler;

namespace {

template <typename F>
double best_ms(int reps, F f) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto v = f(static_cast<std::uint64_t>(r));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (v.empty()) std::abort();  // keep the result alive
    best = std::min(best, ms);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const std::uint32_t large = argc > 1 ? static_cast<std::uint32_t>(std::atol(argv[1])) : 1281167;
  const std::uint32_t small = argc > 2 ? static_cast<std::uint32_t>(std::atol(argv[2])) : 64;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 5;
  const std::uint64_t n = std::uint64_t{large} + small;
  auto line = [&](const char* name, double ms) {
    std::printf("%-48s %9llu samples %8.1f ms/epoch %6.1f ns/sample\n", name, static_cast<unsigned long long>(n), ms,
                ms * 1e6 / static_cast<double>(n));
  };
  line("one permutation (epoch_permutation)",
       best_ms(reps, [&](std::uint64_t e) { return epoch_permutation(static_cast<std::uint32_t>(n), true, 1, e); }));
  Mixture m;
  m.sources = {{0, large, 1.0}, {large, small, 1.0}};
  m.epoch_size = n;
  line("mixture, 2 sources, weights 1:1", best_ms(reps, [&](std::uint64_t e) { return mixture_order(m, true, 1, e); }));
  line("mixture, 1:1, visits tagged (as Job::epoch_ids)",
       best_ms(reps, [&](std::uint64_t e) { return mixture_order(m, true, 1, e, /*tag_visits=*/true); }));
  m.sources[1].weight = 0.01;
  line("mixture, 2 sources, weights 1:0.01", best_ms(reps, [&](std::uint64_t e) { return mixture_order(m, true, 1, e); }));
  line("mixture, shuffle: false (smooth round-robin)",
       best_ms(reps, [&](std::uint64_t e) { return mixture_order(m, false, 1, e); }));
  return 0;
}
