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

// torch.utils.data.DistributedSampler: with drop_last the permutation is cut to a multiple of
// world; otherwise it is padded by repeating from its start. Rank r takes positions r, r+world, ...
std::vector<std::uint32_t> rank_samples(const std::vector<std::uint32_t>& permutation,
                                        std::uint32_t world, std::uint32_t rank, bool drop_last);

std::uint64_t samples_per_rank(std::uint64_t n, std::uint32_t world, bool drop_last);

// Batches per epoch for one rank: floor with drop_last (incomplete tail batch dropped),
// ceil otherwise.
std::uint64_t batches_per_epoch(std::uint64_t per_rank, std::uint32_t batch_size, bool drop_last);

}  // namespace stoker::sampler
