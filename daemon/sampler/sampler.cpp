#include "sampler/sampler.hpp"

#include <numeric>

#include "core/rng.hpp"

namespace stoker::sampler {

std::vector<std::uint32_t> epoch_permutation(std::uint32_t n, bool shuffle, std::uint64_t seed,
                                             std::uint64_t epoch) {
  std::vector<std::uint32_t> p(n);
  std::iota(p.begin(), p.end(), 0u);
  if (!shuffle || n < 2) return p;
  CounterRng rng(seed, epoch, 0, kStreamPermutation);
  shuffle_in_place(p.data(), p.data() + p.size(), rng);
  return p;
}

std::uint64_t samples_per_rank(std::uint64_t n, std::uint32_t world, std::uint32_t rank, Shards shards) {
  if (world == 0 || rank >= world) return 0;
  switch (shards) {
    case Shards::kDrop: return n / world;
    case Shards::kUneven: return n / world + (rank < n % world ? 1 : 0);
    case Shards::kPad: break;
  }
  return (n + world - 1) / world;
}

std::vector<std::uint32_t> rank_samples(const std::vector<std::uint32_t>& permutation,
                                        std::uint32_t world, std::uint32_t rank, Shards shards) {
  const std::uint64_t n = permutation.size();
  const std::uint64_t per_rank = samples_per_rank(n, world, rank, shards);
  std::vector<std::uint32_t> out;
  if (n == 0 || rank >= world) return out;
  out.reserve(per_rank);
  // Position k of the (padded or cut) epoch list is permutation[k % n]: padding repeats the
  // list from its start, as many times as needed when n < world.
  for (std::uint64_t i = 0; i < per_rank; ++i) {
    const std::uint64_t k = rank + i * world;
    out.push_back(permutation[k % n]);
  }
  return out;
}

std::vector<std::uint32_t> rank_samples_from(const std::vector<std::uint32_t>& permutation, std::uint64_t consumed,
                                             std::uint32_t world, std::uint32_t rank, Shards shards) {
  if (consumed == 0) return rank_samples(permutation, world, rank, shards);
  const std::uint64_t n = permutation.size();
  if (consumed >= n || rank >= world) return {};
  const std::uint64_t rest = n - consumed;
  const std::uint64_t per_rank = samples_per_rank(rest, world, rank, shards);
  std::vector<std::uint32_t> out;
  out.reserve(per_rank);
  // Position q of the rest's (padded or cut) list is permutation[consumed + q]; padding past
  // its end repeats the EPOCH's start, permutation[0], [1], ..., as DistributedSampler pads.
  // So a resume on the same world is the ordinary split's tail, batch for batch.
  for (std::uint64_t i = 0; i < per_rank; ++i) {
    const std::uint64_t q = rank + i * world;
    out.push_back(q < rest ? permutation[consumed + q] : permutation[(q - rest) % n]);
  }
  return out;
}

std::uint64_t batches_per_epoch(std::uint64_t per_rank, std::uint32_t batch_size, bool drop_last) {
  if (batch_size == 0) return 0;
  return drop_last ? per_rank / batch_size : (per_rank + batch_size - 1) / batch_size;
}

}  // namespace stoker::sampler
