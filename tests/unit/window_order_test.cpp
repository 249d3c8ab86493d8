// Unit tier: the windowed shard order (`shuffle: {window_shards: N}`, sampler/window_order.hpp).
// It must be a permutation; its shards must come in windows of N, each window's samples
// contiguous in the order; it must be a pure function of (layout, N, seed, epoch); and, being
// one global list, elastic resume must split it like any other epoch order.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "sampler/sampler.hpp"
#include "sampler/window_order.hpp"

using namespace stoker::sampler;
using Ids = std::vector<std::uint32_t>;

namespace {

// Shards of uneven sizes (1 to 13 samples), as tar shards often are.
struct Layout {
  Ids starts;
  std::uint32_t n = 0;
};
Layout uneven_layout(std::uint32_t shards) {
  Layout l;
  for (std::uint32_t k = 0; k < shards; ++k) {
    l.starts.push_back(l.n);
    l.n += 1 + (k * 7) % 13;
  }
  return l;
}

std::uint32_t shard_of(const Layout& l, std::uint32_t id) {
  return static_cast<std::uint32_t>(std::upper_bound(l.starts.begin(), l.starts.end(), id) - l.starts.begin()) - 1;
}

bool is_permutation_of_n(Ids order, std::uint32_t n) {
  std::sort(order.begin(), order.end());
  Ids want(n);
  std::iota(want.begin(), want.end(), 0u);
  return order == want;
}

// The windows the order really has: shards sorted by where they first appear, taken N at a
// time. The order is windowed iff each such group's samples fill one contiguous stretch, the
// stretches in group order. Returns the stretches' lengths (empty when it is not windowed).
std::vector<std::size_t> windows_of(const Layout& l, const Ids& order, std::uint32_t window) {
  const auto shards = static_cast<std::uint32_t>(l.starts.size());
  std::vector<std::size_t> first(shards, SIZE_MAX), last(shards, 0), size(shards, 0);
  for (std::size_t pos = 0; pos < order.size(); ++pos) {
    const std::uint32_t s = shard_of(l, order[pos]);
    first[s] = std::min(first[s], pos);
    last[s] = pos;
    ++size[s];
  }
  Ids by_first(shards);
  std::iota(by_first.begin(), by_first.end(), 0u);
  std::sort(by_first.begin(), by_first.end(), [&](auto a, auto b) { return first[a] < first[b]; });
  std::vector<std::size_t> out;
  std::size_t at = 0;
  for (std::size_t g = 0; g < shards; g += window) {
    std::size_t lo = SIZE_MAX, hi = 0, samples = 0;
    for (std::size_t k = g; k < std::min<std::size_t>(shards, g + window); ++k) {
      lo = std::min(lo, first[by_first[k]]);
      hi = std::max(hi, last[by_first[k]]);
      samples += size[by_first[k]];
    }
    if (lo != at || hi + 1 - lo != samples) return {};  // a stranger inside, or a gap
    out.push_back(samples);
    at = hi + 1;
  }
  return out;
}

// Distinct shards among order[from, from + len).
std::size_t shards_in(const Layout& l, const Ids& order, std::size_t from, std::size_t len) {
  std::set<std::uint32_t> s;
  for (std::size_t i = from; i < std::min(order.size(), from + len); ++i) s.insert(shard_of(l, order[i]));
  return s.size();
}

}  // namespace

TEST_CASE("window order: a permutation in windows of N shards, each window's samples together", "[sampler][window]") {
  for (std::uint32_t shards : {1u, 2u, 7u, 12u, 31u}) {
    const Layout l = uneven_layout(shards);
    for (std::uint32_t window : {1u, 2u, 3u, 5u}) {
      for (std::uint64_t epoch : {0u, 1u, 6u}) {
        INFO("shards " << shards << " window " << window << " epoch " << epoch);
        const Ids order = window_permutation(l.starts, l.n, window, 42, epoch);
        REQUIRE(is_permutation_of_n(order, l.n));
        const auto windows = windows_of(l, order, window);
        REQUIRE(windows.size() == (shards + window - 1) / window);
        // Any stretch as long as the shortest window touches at most 2N shards (one boundary).
        const std::size_t shortest = *std::min_element(windows.begin(), windows.end());
        for (std::size_t from = 0; from + shortest <= order.size(); ++from) {
          CHECK(shards_in(l, order, from, shortest) <= 2 * window);
        }
      }
    }
  }
}

TEST_CASE("window order: a function of (seed, epoch), another epoch or seed another order", "[sampler][window]") {
  const Layout l = uneven_layout(20);
  const Ids a = window_permutation(l.starts, l.n, 4, 7, 3);
  CHECK(a == window_permutation(l.starts, l.n, 4, 7, 3));
  CHECK(a != window_permutation(l.starts, l.n, 4, 7, 4));
  CHECK(a != window_permutation(l.starts, l.n, 4, 8, 3));
  CHECK(a != window_permutation(l.starts, l.n, 5, 7, 3));
  // The shards' order itself changes between epochs, not only the samples within windows.
  std::set<std::uint32_t> first_shards;
  for (std::uint64_t e = 0; e < 8; ++e) first_shards.insert(shard_of(l, window_permutation(l.starts, l.n, 1, 7, e)[0]));
  CHECK(first_shards.size() > 1);
}

TEST_CASE("window order: N at least the shard count is one window, a full shuffle", "[sampler][window]") {
  const Layout l = uneven_layout(10);
  const Ids whole = window_permutation(l.starts, l.n, 10, 5, 2);
  CHECK(whole == window_permutation(l.starts, l.n, 1000, 5, 2));
  CHECK(whole == window_permutation(l.starts, l.n, UINT32_MAX, 5, 2));  // the config's largest N
  CHECK(is_permutation_of_n(whole, l.n));
  // Mixed across the whole dataset: the first 16 positions already come from many shards.
  CHECK(shards_in(l, whole, 0, 16) >= 5);
  // No layout at all is one shard: still a permutation.
  CHECK(is_permutation_of_n(window_permutation({}, 50, 3, 5, 2), 50));
  CHECK(window_permutation(l.starts, 0, 3, 5, 2).empty());
}

TEST_CASE("window order: N = 1 visits the shards one at a time, each shard's samples shuffled", "[sampler][window]") {
  const Layout l = uneven_layout(9);
  const Ids order = window_permutation(l.starts, l.n, 1, 3, 0);
  REQUIRE(is_permutation_of_n(order, l.n));
  std::vector<std::uint32_t> visited;
  bool shuffled_within = false;
  for (std::size_t pos = 0; pos < order.size(); ++pos) {
    const std::uint32_t s = shard_of(l, order[pos]);
    if (visited.empty() || visited.back() != s) {
      CHECK(std::find(visited.begin(), visited.end(), s) == visited.end());  // never back to a shard
      visited.push_back(s);
    } else if (order[pos] != order[pos - 1] + 1) {
      shuffled_within = true;
    }
  }
  CHECK(visited.size() == 9);
  CHECK(!std::is_sorted(visited.begin(), visited.end()));
  CHECK(shuffled_within);
}

TEST_CASE("window order: elastic resume, 2 -> 3 ranks, serves every sample once (uneven split)",
          "[sampler][window][elastic]") {
  const Layout l = uneven_layout(15);
  const Ids perm = window_permutation(l.starts, l.n, 3, 11, 4);
  for (std::uint64_t k : {1u, 3u, 7u}) {
    INFO("after " << k << " batches of 4 on 2 ranks");
    std::map<std::uint32_t, int> served;
    for (std::uint32_t r = 0; r < 2; ++r) {
      const Ids mine = rank_samples(perm, 2, r, Shards::kUneven);
      for (std::size_t i = 0; i < std::min<std::size_t>(mine.size(), k * 4); ++i) served[mine[i]]++;
    }
    for (std::uint32_t r = 0; r < 3; ++r) {
      for (const auto id : rank_samples_from(perm, k * 4 * 2, 3, r, Shards::kUneven)) served[id]++;
    }
    CHECK(served.size() == l.n);
    CHECK(std::all_of(served.begin(), served.end(), [](const auto& kv) { return kv.second == 1; }));
  }
}
