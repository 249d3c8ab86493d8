// The epoch order of `shuffle: {window_shards: N}`: a shard-aware shuffle for tar datasets far
// larger than a cache. A pure function of the shard layout, N, (seed, epoch), like
// epoch_permutation, so the ranks' split (rank_samples), elastic resume (rank_samples_from)
// and every worker count see the same list.
//
// The shards are put in a random order, cut into windows of N consecutive shards, and the
// samples of each window are shuffled among themselves; the windows follow each other. So
// every stretch of the order that lies within one window reads from at most N shards, and any
// stretch no longer than a window from at most 2N (it straddles at most one boundary): each
// shard's bytes are all read within one window, once per epoch. The price is mixing: two
// samples can only meet in a batch when their shards share a window.
#pragma once

#include <cstdint>
#include <vector>

namespace stoker::sampler {

// `shard_starts`: the first sample id of each shard, strictly ascending, the first 0; shard k
// holds ids [shard_starts[k], shard_starts[k+1]) and the last one [shard_starts.back(), n).
// (Tar sources give each shard's samples contiguous ids, in pattern order; a shard without
// samples has no entry.) `window_shards` >= 1; when it is at least the number of shards the
// whole epoch is one window (a full shuffle, though not epoch_permutation's).
// Returns a permutation of 0..n-1 (n == 0: empty).
std::vector<std::uint32_t> window_permutation(const std::vector<std::uint32_t>& shard_starts, std::uint32_t n,
                                              std::uint32_t window_shards, std::uint64_t seed, std::uint64_t epoch);

}  // namespace stoker::sampler
