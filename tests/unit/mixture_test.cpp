// Unit tier: the order of a weighted mixture of sources (sampler/mixture.hpp). Shares follow
// the weights, each source's samples appear once per source epoch (its own permutation,
// continued across job epochs), and the order is a pure function of (mixture, seed, epoch).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include "sampler/mixture.hpp"
#include "sampler/sampler.hpp"

using namespace stoker::sampler;
using Ids = std::vector<std::uint32_t>;

namespace {

// A small source up-weighted (repeats), a large one down-weighted (visited in part), and a
// middle one; epoch_size is the sum of sizes, the default of the job key.
Mixture three_sources() {
  Mixture m;
  m.sources = {{0, 50, 3.0}, {50, 1000, 1.0}, {1050, 200, 1.0}};
  m.epoch_size = 1250;
  return m;
}

}  // namespace

TEST_CASE("mixture: over 20 epochs each source's share is within 3 standard deviations of its weight") {
  const Mixture m = three_sources();
  const double total_w = 5.0;
  std::vector<double> count(m.sources.size(), 0);
  const std::uint64_t epochs = 20;
  for (std::uint64_t e = 0; e < epochs; ++e) {
    const Ids order = mixture_order(m, true, 11, e);
    REQUIRE(order.size() == m.epoch_size);
    for (const auto id : order) count[source_of(m, id)]++;
  }
  const double n = static_cast<double>(epochs * m.epoch_size);
  for (std::size_t s = 0; s < m.sources.size(); ++s) {
    const double p = m.sources[s].weight / total_w;
    const double sigma = std::sqrt(n * p * (1 - p));
    INFO("source " << s << ": " << count[s] << " of " << n << ", expected " << n * p);
    CHECK(std::abs(count[s] - n * p) <= 3 * sigma);
  }
}

TEST_CASE("mixture: each source's samples appear once per source epoch, across job epochs") {
  const Mixture m = three_sources();
  for (const bool shuffle : {true, false}) {
    std::vector<Ids> walk(m.sources.size());  // each source's ids in the order served
    for (std::uint64_t e = 0; e < 20; ++e) {
      for (const auto id : mixture_order(m, shuffle, 5, e)) walk[source_of(m, id)].push_back(id);
    }
    for (std::size_t s = 0; s < m.sources.size(); ++s) {
      const auto& src = m.sources[s];
      const Ids& w = walk[s];
      REQUIRE(w.size() >= src.size);
      // Every complete source epoch is a permutation of that source's ids; the last, partial
      // one holds no id twice.
      for (std::size_t from = 0; from < w.size(); from += src.size) {
        const std::size_t to = std::min(w.size(), from + src.size);
        std::set<std::uint32_t> seen(w.begin() + static_cast<std::ptrdiff_t>(from),
                                     w.begin() + static_cast<std::ptrdiff_t>(to));
        INFO("shuffle " << shuffle << " source " << s << " source epoch " << from / src.size);
        CHECK(seen.size() == to - from);
        CHECK(*seen.begin() >= src.offset);
        CHECK(*seen.rbegin() < src.offset + src.size);
      }
      // Source epoch counters as reported: how many complete walks came before job epoch e.
      CHECK(source_epoch_at(m, s, 20) == w.size() / src.size);
    }
  }
}

TEST_CASE("mixture: an up-weighted small source repeats within an epoch, a down-weighted large one is partly visited") {
  const Mixture m = three_sources();
  const auto quota = mixture_quotas(m);
  CHECK(quota == std::vector<std::uint64_t>{750, 250, 250});
  const Ids order = mixture_order(m, true, 1, 0);
  std::vector<std::set<std::uint32_t>> distinct(3);
  for (const auto id : order) distinct[source_of(m, id)].insert(id);
  CHECK(distinct[0].size() == 50);   // 750 draws of 50 samples: every one, 15 times
  CHECK(distinct[1].size() == 250);  // a quarter of the large source
  CHECK(distinct[2].size() == 200);  // 250 draws: all 200, then 50 of its second source epoch
  CHECK(source_epoch_at(m, 0, 1) == 15);
  CHECK(source_epoch_at(m, 1, 4) == 1);  // the large source is done once every 4 job epochs
}

TEST_CASE("mixture: the order is a pure function of (mixture, seed, epoch)") {
  const Mixture m = three_sources();
  CHECK(mixture_order(m, true, 3, 7) == mixture_order(m, true, 3, 7));
  CHECK(mixture_order(m, true, 3, 7) != mixture_order(m, true, 4, 7));
  CHECK(mixture_order(m, true, 3, 7) != mixture_order(m, true, 3, 8));
  // shuffle: false is a fixed, smooth interleave of identity walks.
  const Ids plain = mixture_order(m, false, 3, 0);
  CHECK(plain == mixture_order(m, false, 99, 0));
  CHECK(plain[0] == 0);  // the heaviest source first, from its first sample
  // In every prefix of 100 positions each source is within one of its share.
  const auto quota = mixture_quotas(m);
  std::vector<double> taken(3, 0);
  for (std::size_t i = 0; i < plain.size(); ++i) {
    taken[source_of(m, plain[i])]++;
    if ((i + 1) % 100 == 0) {
      for (std::size_t s = 0; s < 3; ++s) {
        CHECK(std::abs(taken[s] - static_cast<double>(quota[s]) * static_cast<double>(i + 1) / 1250.0) <= 1.0);
      }
    }
  }
}

TEST_CASE("mixture: quotas sum to epoch_size for any weights and sizes") {
  Mixture m;
  m.sources = {{0, 7, 0.1}, {7, 3, 0.7}, {10, 1, 1e-6}};
  for (const std::uint64_t e : {1ull, 2ull, 11ull, 1000ull, 12345ull}) {
    m.epoch_size = e;
    const auto q = mixture_quotas(m);
    CHECK(std::accumulate(q.begin(), q.end(), std::uint64_t{0}) == e);
    CHECK(mixture_order(m, true, 0, 3).size() == e);
  }
}

TEST_CASE("mixture: the ranks' split of a mixture epoch is the ordinary split of its list") {
  const Mixture m = three_sources();
  const Ids order = mixture_order(m, true, 2, 1);
  std::multiset<std::uint32_t> all;
  for (std::uint32_t r = 0; r < 3; ++r) {
    for (const auto id : rank_samples(order, 3, r, Shards::kUneven)) all.insert(id);
  }
  CHECK(all == std::multiset<std::uint32_t>(order.begin(), order.end()));
}

TEST_CASE("mixture: tagged visits untag to the order, and two visits of a sample in an epoch differ") {
  const Mixture m = three_sources();
  for (std::uint64_t e = 0; e < 5; ++e) {
    const Ids plain = mixture_order(m, true, 9, e);
    const Ids tagged = mixture_order(m, true, 9, e, /*tag_visits=*/true);
    REQUIRE(tagged.size() == plain.size());
    for (std::size_t i = 0; i < plain.size(); ++i) CHECK(untag(m, tagged[i]) == plain[i]);
    // Source 0 (50 samples, 750 positions) is visited 15 times an epoch: every visit distinct.
    CHECK(std::set<std::uint32_t>(tagged.begin(), tagged.end()).size() == tagged.size());
  }
  CHECK(mixture_total(m) == 1250);
  CHECK(visit_tags(m) == 0xffffffffull / 1250);
}
