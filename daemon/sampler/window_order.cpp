#include "sampler/window_order.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

#include "core/rng.hpp"

namespace stoker::sampler {

std::vector<std::uint32_t> window_permutation(const std::vector<std::uint32_t>& shard_starts, std::uint32_t n,
                                              std::uint32_t window_shards, std::uint64_t seed, std::uint64_t epoch) {
  std::vector<std::uint32_t> out;
  if (n == 0) return out;
  const std::uint32_t window = std::max<std::uint32_t>(window_shards, 1);
  const auto shards = static_cast<std::uint32_t>(shard_starts.size());
  // No layout given: one shard of everything (still a permutation, still deterministic).
  const std::vector<std::uint32_t> whole{0};
  const std::vector<std::uint32_t>& starts = shards == 0 ? whole : shard_starts;
  const auto count = static_cast<std::uint32_t>(starts.size());
  const auto end_of = [&](std::uint32_t k) { return k + 1 < count ? starts[k + 1] : n; };

  std::vector<std::uint32_t> order(count);
  std::iota(order.begin(), order.end(), 0u);
  CounterRng shard_rng(seed, epoch, 0, kStreamWindowShards);
  shuffle_in_place(order.data(), order.data() + count, shard_rng);

  out.reserve(n);
  // Window w holds order[first, first + window); 64-bit so that a window larger than the
  // shard count cannot wrap.
  for (std::uint64_t first = 0, w = 0; first < count; first += window, ++w) {
    const std::size_t begin = out.size();
    const std::uint64_t last = std::min<std::uint64_t>(count, first + window);
    for (std::uint64_t k = first; k < last; ++k) {
      for (std::uint32_t id = starts[order[k]]; id < end_of(order[k]); ++id) out.push_back(id);
    }
    // Each window's draw is keyed by its own index, so it does not depend on how many numbers
    // the windows before it took.
    CounterRng rng(seed, epoch, 1 + w, kStreamWindowShards);
    shuffle_in_place(out.data() + begin, out.data() + out.size(), rng);
  }
  return out;
}

}  // namespace stoker::sampler
