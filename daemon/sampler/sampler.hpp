// Which samples a consumer rank gets, in which batches. Pure functions of the config,
// (seed, epoch) and the rank: no state, no threads.
#pragma once

#include <cstdint>
#include <vector>

namespace stoker::sampler {

// The epoch's order of all sample ids 0..n-1: identity when !shuffle, else a Fisher-Yates
// permutation driven by CounterRng(seed, epoch, 0, kStreamPermutation).
std::vector<std::uint32_t> epoch_permutation(std::uint32_t n, bool shuffle, std::uint64_t seed,
                                             std::uint64_t epoch);

// How an epoch is split between the ranks of a world. Rank r always takes positions
// r, r+world, r+2*world, ... of the epoch list; what differs is that list's length:
//  kPad    torch.utils.data.DistributedSampler(drop_last=False): padded to a multiple of world
//          by repeating from its start (a few samples twice; every rank the same count);
//  kDrop   DistributedSampler(drop_last=True): cut to a multiple of world (a few samples not
//          at all this epoch; every rank the same count);
//  kUneven every sample exactly once (validation): ranks r < n % world take one more sample.
enum class Shards { kPad, kDrop, kUneven };

std::vector<std::uint32_t> rank_samples(const std::vector<std::uint32_t>& permutation,
                                        std::uint32_t world, std::uint32_t rank, Shards shards);
std::uint64_t samples_per_rank(std::uint64_t n, std::uint32_t world, std::uint32_t rank, Shards shards);

// The DistributedSampler forms: drop_last true is kDrop, false kPad (same count on every rank).
inline std::vector<std::uint32_t> rank_samples(const std::vector<std::uint32_t>& permutation,
                                               std::uint32_t world, std::uint32_t rank, bool drop_last) {
  return rank_samples(permutation, world, rank, drop_last ? Shards::kDrop : Shards::kPad);
}
inline std::uint64_t samples_per_rank(std::uint64_t n, std::uint32_t world, bool drop_last) {
  return samples_per_rank(n, world, 0, drop_last ? Shards::kDrop : Shards::kPad);
}

// Batches per epoch for one rank: floor with drop_last (incomplete tail batch dropped),
// ceil otherwise.
std::uint64_t batches_per_epoch(std::uint64_t per_rank, std::uint32_t batch_size, bool drop_last);

}  // namespace stoker::sampler
