// Unit tier: elastic resume's maths (sampler::rank_samples_from). A W-rank run that took k
// batches of B on every rank consumed exactly the first k*B*W positions of the epoch's order;
// resuming from there on W' ranks must serve the rest of the epoch, each sample once (up to the
// padding / cut the shard rule applies to the remainder), and a resume on the same world must
// equal the ordinary per-rank resume.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <vector>

#include "sampler/sampler.hpp"

using namespace stoker::sampler;
using Ids = std::vector<std::uint32_t>;

namespace {

// What every rank of a `world`-rank run took in its first `batches` batches of `batch`.
Ids consumed_by(const Ids& perm, std::uint32_t world, Shards shards, std::uint64_t batches, std::uint32_t batch) {
  Ids out;
  for (std::uint32_t r = 0; r < world; ++r) {
    const Ids mine = rank_samples(perm, world, r, shards);
    const auto take = std::min<std::uint64_t>(mine.size(), batches * batch);
    out.insert(out.end(), mine.begin(), mine.begin() + static_cast<std::ptrdiff_t>(take));
  }
  return out;
}

Ids resumed_by(const Ids& perm, std::uint64_t position, std::uint32_t world, Shards shards) {
  Ids out;
  for (std::uint32_t r = 0; r < world; ++r) {
    const Ids mine = rank_samples_from(perm, position, world, r, shards);
    out.insert(out.end(), mine.begin(), mine.end());
  }
  return out;
}

std::map<std::uint32_t, int> counts(const Ids& a, const Ids& b) {
  std::map<std::uint32_t, int> c;
  for (auto id : a) c[id]++;
  for (auto id : b) c[id]++;
  return c;
}

const char* name(Shards s) { return s == Shards::kPad ? "pad" : s == Shards::kDrop ? "drop" : "uneven"; }

}  // namespace

TEST_CASE("elastic: what W ranks consumed after k batches is the first k*B*W positions", "[sampler][elastic]") {
  const Ids perm = epoch_permutation(103, true, 7, 3);
  for (Shards shards : {Shards::kPad, Shards::kDrop, Shards::kUneven}) {
    for (std::uint64_t k : {0u, 1u, 3u, 6u}) {
      Ids got = consumed_by(perm, 4, shards, k, 4);
      Ids want(perm.begin(), perm.begin() + static_cast<std::ptrdiff_t>(k * 4 * 4));
      std::sort(got.begin(), got.end());
      std::sort(want.begin(), want.end());
      INFO(name(shards) << " k=" << k);
      CHECK(got == want);
    }
  }
}

TEST_CASE("elastic: 4 -> 3 and 4 -> 6 ranks serve the rest of the epoch once", "[sampler][elastic]") {
  for (std::uint32_t n : {96u, 103u, 101u, 50u}) {
    const Ids perm = epoch_permutation(n, true, 11, 2);
    for (Shards shards : {Shards::kPad, Shards::kDrop, Shards::kUneven}) {
      for (std::uint32_t to : {3u, 6u}) {
        for (std::uint64_t k : {1u, 2u, 5u}) {
          const std::uint32_t batch = 4;
          const std::uint64_t position = k * batch * 4;
          if (position > samples_per_rank(n, 4, 0, shards) * 4) continue;
          const Ids before = consumed_by(perm, 4, shards, k, batch);
          const Ids after = resumed_by(perm, position, to, shards);
          const auto c = counts(before, after);
          const std::uint64_t rest = n > position ? n - position : 0;
          INFO(name(shards) << " n=" << n << " 4->" << to << " k=" << k);
          std::uint64_t twice = 0, missing = 0;
          for (std::uint32_t id = 0; id < n; ++id) {
            const auto it = c.find(id);
            const int times = it == c.end() ? 0 : it->second;
            CHECK(times <= 2);
            if (times == 0) ++missing;
            if (times == 2) ++twice;
          }
          // Nothing the first run took comes again except as the new world's padding, which
          // repeats the epoch's first samples (as DistributedSampler's padding does).
          const std::uint64_t pad = shards == Shards::kPad ? (to - rest % to) % to : 0;
          for (std::size_t i = 0; i < before.size(); ++i) CHECK(c.at(perm[i]) == (i < pad ? 2 : 1));
          switch (shards) {
            case Shards::kUneven:
              CHECK(missing == 0);
              CHECK(twice == 0);
              CHECK(after.size() == rest);
              break;
            case Shards::kPad:
              CHECK(missing == 0);
              CHECK(twice == (to - rest % to) % to);
              break;
            case Shards::kDrop:
              CHECK(twice == 0);
              CHECK(missing == rest % to);
              break;
          }
          // Every rank of the new world gets the same count (pad, drop) or one apart (uneven).
          std::uint64_t most = 0, least = UINT64_MAX;
          for (std::uint32_t r = 0; r < to; ++r) {
            const auto size = rank_samples_from(perm, position, to, r, shards).size();
            CHECK(size == samples_per_rank(rest, to, r, shards));
            most = std::max<std::uint64_t>(most, size);
            least = std::min<std::uint64_t>(least, size);
          }
          CHECK(most - least <= (shards == Shards::kUneven ? 1u : 0u));
        }
      }
    }
  }
}

TEST_CASE("elastic: a resume on the same world is the ordinary per-rank resume", "[sampler][elastic]") {
  const Ids perm = epoch_permutation(103, true, 5, 1);
  for (Shards shards : {Shards::kPad, Shards::kDrop, Shards::kUneven}) {
    for (std::uint64_t k : {0u, 1u, 4u}) {
      for (std::uint32_t r = 0; r < 4; ++r) {
        const Ids whole = rank_samples(perm, 4, r, shards);
        const Ids from = rank_samples_from(perm, k * 3 * 4, 4, r, shards);
        INFO(name(shards) << " k=" << k << " rank " << r);
        REQUIRE(whole.size() >= k * 3);
        CHECK(from == Ids(whole.begin() + static_cast<std::ptrdiff_t>(k * 3), whole.end()));
      }
    }
  }
}

TEST_CASE("elastic: a second resume composes (4 -> 3 -> 6)", "[sampler][elastic]") {
  const Ids perm = epoch_permutation(103, true, 9, 0);
  const Shards shards = Shards::kUneven;
  const Ids first = consumed_by(perm, 4, shards, 2, 4);  // positions 0..32
  // The 3-rank run resumed at 32 and took 3 batches of 4 on every rank: 36 more positions.
  Ids second;
  for (std::uint32_t r = 0; r < 3; ++r) {
    const Ids mine = rank_samples_from(perm, 32, 3, r, shards);
    second.insert(second.end(), mine.begin(), mine.begin() + 12);
  }
  const Ids third = resumed_by(perm, 32 + 36, 6, shards);
  Ids all = first;
  all.insert(all.end(), second.begin(), second.end());
  all.insert(all.end(), third.begin(), third.end());
  std::sort(all.begin(), all.end());
  Ids every(103);
  std::iota(every.begin(), every.end(), 0u);
  CHECK(all == every);
}

TEST_CASE("elastic: a position at or past the epoch's end leaves nothing", "[sampler][elastic]") {
  const Ids perm = epoch_permutation(10, true, 1, 0);
  // 4 ranks padded 10 to 12: the last batch ended in the padding (position 12).
  for (std::uint32_t r = 0; r < 3; ++r) {
    CHECK(rank_samples_from(perm, 12, 3, r, Shards::kPad).empty());
    CHECK(rank_samples_from(perm, 10, 3, r, Shards::kUneven).empty());
  }
  CHECK(rank_samples_from(Ids{}, 0, 3, 0, Shards::kPad).empty());
}
