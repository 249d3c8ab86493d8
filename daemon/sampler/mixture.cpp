#include "sampler/mixture.hpp"

#include <algorithm>
#include <numeric>

#include "core/rng.hpp"

namespace stoker::sampler {

namespace {

// Source `s`'s order for its own epoch `k`: identity, or Fisher-Yates keyed (seed, k, s).
void source_permutation(std::vector<std::uint32_t>& p, std::uint32_t n, bool shuffle, std::uint64_t seed,
                        std::size_t s, std::uint64_t k) {
  p.resize(n);
  std::iota(p.begin(), p.end(), 0u);
  if (!shuffle || n < 2) return;
  CounterRng rng(seed, k, s, kStreamMixtureSource);
  shuffle_in_place(p.data(), p.data() + p.size(), rng);
}

// Which source takes each position of the epoch: quota[s] positions for source s.
std::vector<std::uint16_t> interleave(const std::vector<std::uint64_t>& quota, std::uint64_t epoch_size,
                                      bool shuffle, std::uint64_t seed, std::uint64_t epoch) {
  std::vector<std::uint16_t> who;
  who.reserve(epoch_size);
  if (shuffle) {
    for (std::size_t s = 0; s < quota.size(); ++s) who.insert(who.end(), quota[s], static_cast<std::uint16_t>(s));
    CounterRng rng(seed, epoch, 0, kStreamMixtureInterleave);
    shuffle_in_place(who.data(), who.data() + who.size(), rng);
    return who;
  }
  // Smooth round-robin: position i goes to the source furthest behind its share of i+1
  // positions (ties: the lower index), so every prefix holds each source near its weight.
  std::vector<std::uint64_t> taken(quota.size(), 0);
  for (std::uint64_t i = 0; i < epoch_size; ++i) {
    std::size_t best = 0;
    double best_lag = -1e300;
    for (std::size_t s = 0; s < quota.size(); ++s) {
      if (taken[s] == quota[s]) continue;
      const double lag = static_cast<double>(quota[s]) * static_cast<double>(i + 1) / static_cast<double>(epoch_size) -
                         static_cast<double>(taken[s]);
      if (lag > best_lag) best_lag = lag, best = s;
    }
    ++taken[best];
    who.push_back(static_cast<std::uint16_t>(best));
  }
  return who;
}

}  // namespace

std::vector<std::uint64_t> mixture_quotas(const Mixture& m) {
  const std::size_t n = m.sources.size();
  std::vector<std::uint64_t> q(n, 0);
  if (n == 0) return q;
  double total = 0;
  for (const auto& s : m.sources) total += s.weight;
  // Largest remainder: floors first, then one more to the biggest fractions (ties: lower index).
  std::vector<double> frac(n);
  std::uint64_t given = 0;
  for (std::size_t s = 0; s < n; ++s) {
    const double exact = static_cast<double>(m.epoch_size) * m.sources[s].weight / total;
    q[s] = static_cast<std::uint64_t>(exact);
    frac[s] = exact - static_cast<double>(q[s]);
    given += q[s];
  }
  std::vector<std::size_t> by(n);
  std::iota(by.begin(), by.end(), std::size_t{0});
  std::stable_sort(by.begin(), by.end(), [&](std::size_t a, std::size_t b) { return frac[a] > frac[b]; });
  for (std::size_t i = 0; given < m.epoch_size; i = (i + 1) % n, ++given) ++q[by[i]];
  while (given > m.epoch_size) {  // rounding of huge sizes: take back from the largest
    --*std::max_element(q.begin(), q.end());
    --given;
  }
  return q;
}

std::uint64_t source_epoch_at(const Mixture& m, std::size_t source, std::uint64_t epoch) {
  const auto q = mixture_quotas(m);
  return epoch * q[source] / m.sources[source].size;
}

std::uint64_t mixture_total(const Mixture& m) {
  return m.sources.empty() ? 0 : std::uint64_t{m.sources.back().offset} + m.sources.back().size;
}

std::uint64_t visit_tags(const Mixture& m) {
  const std::uint64_t total = mixture_total(m);
  return total == 0 ? 1 : std::max<std::uint64_t>(1, 0xffffffffull / total);
}

std::vector<std::uint32_t> mixture_order(const Mixture& m, bool shuffle, std::uint64_t seed, std::uint64_t epoch,
                                         bool tag_visits) {
  const std::uint64_t total = mixture_total(m), tags = visit_tags(m);
  const auto quota = mixture_quotas(m);
  const auto who = interleave(quota, m.epoch_size, shuffle, seed, epoch);
  const std::size_t n = m.sources.size();
  // Each source resumes where the previous epochs left it: e * quota positions into its walk.
  std::vector<std::uint64_t> k(n), at(n);
  std::vector<std::vector<std::uint32_t>> perm(n);
  for (std::size_t s = 0; s < n; ++s) {
    const std::uint64_t done = epoch * quota[s];
    k[s] = done / m.sources[s].size;
    at[s] = done % m.sources[s].size;
    if (quota[s] > 0) source_permutation(perm[s], m.sources[s].size, shuffle, seed, s, k[s]);
  }
  std::vector<std::uint32_t> out;
  out.reserve(who.size());
  for (const std::uint16_t s : who) {
    if (at[s] == m.sources[s].size) {  // this source's epoch is over: its next permutation
      source_permutation(perm[s], m.sources[s].size, shuffle, seed, s, ++k[s]);
      at[s] = 0;
    }
    const std::uint64_t id = m.sources[s].offset + perm[s][at[s]++];
    out.push_back(static_cast<std::uint32_t>(tag_visits ? id + total * (k[s] % tags) : id));
  }
  return out;
}

std::size_t source_of(const Mixture& m, std::uint32_t id) {
  const auto it = std::upper_bound(m.sources.begin(), m.sources.end(), id,
                                   [](std::uint32_t v, const MixtureSource& s) { return v < s.offset; });
  return it == m.sources.begin() ? 0 : static_cast<std::size_t>(it - m.sources.begin()) - 1;
}

}  // namespace stoker::sampler
