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

// Elastic resume: rank `rank`'s share of what is left of an epoch after the whole world has
// consumed its first `consumed` positions. Under DistributedSampler's split (rank r of W takes
// positions r, r+W, ...), once every rank took k batches of B the first k*B*W positions are
// consumed whatever W was, so `consumed` describes progress for any world size.
// The remainder is the UNPADDED rest of the epoch's order, permutation[consumed..n) (padding
// only ever sits past position n-1, so what the earlier world consumed is
// permutation[0..min(consumed, n))). That remainder is then split among `world` ranks exactly
// as rank_samples() splits a whole epoch: padded (kPad: repeating the epoch's start, as
// DistributedSampler does), cut (kDrop) or uneven (kUneven) for the NEW world. So across both
// runs kUneven serves every sample of the epoch exactly once, kPad every sample at least once
// (the repeats are the padding: fewer than `world` of the epoch's first samples), kDrop every
// sample at most once (fewer than `world` of the rest's end left out). On the same world it is
// exactly the ordinary split from that position on. The global permutation itself never
// changes; only how its remainder is split does. consumed >= n leaves nothing (the earlier
// world was in its padding).
// `permutation` is the epoch's global order (epoch_permutation, or a mixture's interleave).
std::vector<std::uint32_t> rank_samples_from(const std::vector<std::uint32_t>& permutation, std::uint64_t consumed,
                                             std::uint32_t world, std::uint32_t rank, Shards shards);

// Batches per epoch for one rank: floor with drop_last (incomplete tail batch dropped),
// ceil otherwise.
std::uint64_t batches_per_epoch(std::uint64_t per_rank, std::uint32_t batch_size, bool drop_last);

}  // namespace stoker::sampler
