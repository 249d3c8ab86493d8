// Unit tier: the sampler's maths. What ranks get must equal torch's DistributedSampler on the
// same epoch list, and the epoch list must be a pure function of (seed, epoch).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <vector>

#include "core/rng.hpp"
#include "sampler/sampler.hpp"

using namespace stoker::sampler;
using Ids = std::vector<std::uint32_t>;

namespace {

Ids iota(std::uint32_t n) {
  Ids v(n);
  std::iota(v.begin(), v.end(), 0u);
  return v;
}

// torch.utils.data.DistributedSampler.__iter__, step by step, on a given epoch list.
Ids torch_rank_samples(Ids indices, std::uint32_t world, std::uint32_t rank, bool drop_last) {
  const std::size_t n = indices.size();
  std::size_t num_samples;
  if (drop_last && n % world != 0) {
    num_samples = static_cast<std::size_t>(std::ceil((static_cast<double>(n) - world) / world));
  } else {
    num_samples = static_cast<std::size_t>(std::ceil(static_cast<double>(n) / world));
  }
  const std::size_t total = num_samples * world;
  if (!drop_last) {
    const std::size_t padding = total - n;
    if (padding <= n) {
      indices.insert(indices.end(), indices.begin(), indices.begin() + static_cast<std::ptrdiff_t>(padding));
    } else {
      const std::size_t times = (padding + n - 1) / n;
      Ids repeated;
      for (std::size_t t = 0; t < times; ++t) repeated.insert(repeated.end(), indices.begin(), indices.end());
      indices.insert(indices.end(), repeated.begin(), repeated.begin() + static_cast<std::ptrdiff_t>(padding));
    }
  } else {
    indices.resize(total);
  }
  Ids out;
  for (std::size_t k = rank; k < total; k += world) out.push_back(indices[k]);
  return out;
}

}  // namespace

TEST_CASE("sampler: shuffle=false is the dataset order", "[sampler]") {
  CHECK(epoch_permutation(0, false, 1, 0).empty());
  CHECK(epoch_permutation(1000, false, 7, 5) == iota(1000));
  CHECK(epoch_permutation(0, true, 1, 0).empty());
  CHECK(epoch_permutation(1, true, 1, 0) == Ids{0});
}

TEST_CASE("sampler: a permutation depends on seed and epoch only", "[sampler]") {
  const Ids a = epoch_permutation(1000, true, 42, 0);
  Ids sorted = a;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == iota(1000));  // every id exactly once
  CHECK(a != iota(1000));
  CHECK(a == epoch_permutation(1000, true, 42, 0));
  CHECK(a != epoch_permutation(1000, true, 42, 1));
  CHECK(a != epoch_permutation(1000, true, 43, 0));
}

TEST_CASE("sampler: the permutation is Fisher-Yates over the permutation stream", "[sampler]") {
  // Pinned: changing the algorithm or the stream silently changes every user's batches and
  // breaks resuming a run across an upgrade, so this test must be changed on purpose.
  const std::uint32_t n = 257;
  Ids expected = iota(n);
  stoker::CounterRng rng(5, 3, 0, stoker::kStreamPermutation);
  for (std::uint32_t i = n - 1; i > 0; --i) std::swap(expected[i], expected[rng.below(std::uint64_t{i} + 1)]);
  CHECK(epoch_permutation(n, true, 5, 3) == expected);
  CHECK(epoch_permutation(8, true, 42, 0) == Ids{7, 0, 2, 4, 3, 6, 1, 5});
}

TEST_CASE("sampler: all orders of a small list are about equally likely", "[sampler]") {
  std::map<Ids, int> count;
  const int draws = 60000;
  for (int e = 0; e < draws; ++e) count[epoch_permutation(3, true, 9, static_cast<std::uint64_t>(e))]++;
  REQUIRE(count.size() == 6);
  for (const auto& [perm, k] : count) CHECK(std::abs(k - draws / 6) < draws / 6 / 20);  // within 5%
}

TEST_CASE("sampler: ranks get what torch's DistributedSampler gives", "[sampler]") {
  for (std::uint32_t n : {1u, 2u, 3u, 7u, 8u, 9u, 64u, 100u, 1001u}) {
    for (std::uint32_t world : {1u, 2u, 3u, 8u, 17u}) {
      for (bool drop : {false, true}) {
        const Ids perm = epoch_permutation(n, true, 3, 2);
        for (std::uint32_t r = 0; r < world; ++r) {
          INFO("n=" << n << " world=" << world << " rank=" << r << " drop_last=" << drop);
          const Ids mine = rank_samples(perm, world, r, drop);
          CHECK(mine == torch_rank_samples(perm, world, r, drop));
          CHECK(mine.size() == samples_per_rank(n, world, drop));
        }
      }
    }
  }
}

TEST_CASE("sampler: every sample exactly once when ranks divide the dataset", "[sampler]") {
  for (bool drop : {false, true}) {
    const Ids perm = epoch_permutation(96, true, 1, 0);
    Ids all;
    for (std::uint32_t r = 0; r < 8; ++r) {
      const Ids mine = rank_samples(perm, 8, r, drop);
      CHECK(mine.size() == 12);
      all.insert(all.end(), mine.begin(), mine.end());
    }
    std::sort(all.begin(), all.end());
    CHECK(all == iota(96));  // union is everything, and disjoint
  }
}

TEST_CASE("sampler: padding repeats the start of the epoch list", "[sampler]") {
  SECTION("n=10, world=4: 12 positions, the first 2 of the list twice") {
    const Ids perm = epoch_permutation(10, true, 11, 4);
    std::map<std::uint32_t, int> seen;
    for (std::uint32_t r = 0; r < 4; ++r) {
      const Ids mine = rank_samples(perm, 4, r, false);
      CHECK(mine.size() == 3);
      for (auto id : mine) seen[id]++;
    }
    REQUIRE(seen.size() == 10);
    for (std::uint32_t i = 0; i < 10; ++i) CHECK(seen[perm[i]] == (i < 2 ? 2 : 1));
    CHECK(rank_samples(perm, 4, 2, false).back() == perm[0]);  // position 10
    CHECK(rank_samples(perm, 4, 3, false).back() == perm[1]);  // position 11
  }
  SECTION("n=3, world=8: the list repeated as many times as needed") {
    const Ids perm = {2, 0, 1};
    for (std::uint32_t r = 0; r < 8; ++r) CHECK(rank_samples(perm, 8, r, false) == Ids{perm[r % 3]});
  }
}

TEST_CASE("sampler: drop_last cuts the tail to a multiple of the ranks", "[sampler]") {
  const Ids perm = epoch_permutation(10, true, 11, 4);
  Ids all;
  for (std::uint32_t r = 0; r < 3; ++r) {
    const Ids mine = rank_samples(perm, 3, r, true);
    CHECK(mine.size() == 3);
    all.insert(all.end(), mine.begin(), mine.end());
  }
  std::sort(all.begin(), all.end());
  Ids kept(perm.begin(), perm.begin() + 9);  // perm[9] is dropped this epoch
  std::sort(kept.begin(), kept.end());
  CHECK(all == kept);
  // Fewer samples than ranks: nobody gets anything.
  for (std::uint32_t r = 0; r < 8; ++r) CHECK(rank_samples(Ids{0, 1, 2}, 8, r, true).empty());
  CHECK(samples_per_rank(3, 8, true) == 0);
}

TEST_CASE("sampler: samples per rank and batches per epoch", "[sampler]") {
  CHECK(samples_per_rank(1281167, 8, false) == 160146);
  CHECK(samples_per_rank(1281167, 8, true) == 160145);
  CHECK(samples_per_rank(50000, 8, false) == 6250);
  CHECK(samples_per_rank(50000, 8, true) == 6250);
  CHECK(samples_per_rank(0, 4, false) == 0);

  CHECK(batches_per_epoch(22, 5, false) == 5);  // 4 full + a short one of 2
  CHECK(batches_per_epoch(22, 5, true) == 4);   // the short one dropped
  CHECK(batches_per_epoch(20, 5, false) == 4);
  CHECK(batches_per_epoch(20, 5, true) == 4);
  CHECK(batches_per_epoch(3, 5, false) == 1);
  CHECK(batches_per_epoch(3, 5, true) == 0);
  CHECK(batches_per_epoch(0, 5, false) == 0);
  CHECK(batches_per_epoch(160146, 256, false) == 626);
  CHECK(batches_per_epoch(160145, 256, true) == 625);
}

TEST_CASE("sampler: pad_shards false gives every sample exactly once, ranks uneven by at most one", "[sampler]") {
  using stoker::sampler::Shards;
  for (std::uint32_t n : {1u, 7u, 63u, 64u, 65u}) {
    for (std::uint32_t world : {1u, 2u, 3u, 8u}) {
      const auto perm = stoker::sampler::epoch_permutation(n, true, 11, 2);
      std::vector<std::uint32_t> all;
      std::uint64_t most = 0, least = UINT64_MAX;
      for (std::uint32_t r = 0; r < world; ++r) {
        const auto mine = stoker::sampler::rank_samples(perm, world, r, Shards::kUneven);
        CHECK(mine.size() == stoker::sampler::samples_per_rank(n, world, r, Shards::kUneven));
        most = std::max<std::uint64_t>(most, mine.size());
        least = std::min<std::uint64_t>(least, mine.size());
        // Same positions as DistributedSampler's, without the padded tail.
        const auto padded = stoker::sampler::rank_samples(perm, world, r, false);
        CHECK(std::equal(mine.begin(), mine.end(), padded.begin()));
        all.insert(all.end(), mine.begin(), mine.end());
      }
      std::sort(all.begin(), all.end());
      std::vector<std::uint32_t> every(n);
      std::iota(every.begin(), every.end(), 0u);
      CHECK(all == every);
      CHECK(most - least <= 1);
    }
  }
}
