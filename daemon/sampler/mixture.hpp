// The epoch order of a weighted mixture of sources (job key `sources:`). A pure function of
// the mixture, (seed, epoch): no state, no threads, like epoch_permutation, so the ranks'
// split (rank_samples), resume and every worker count see the same list.
//
// Global sample ids are the sources concatenated: source s owns ids [offset, offset + size).
// An epoch is `epoch_size` positions. Each source gets a fixed quota of them per epoch (its
// weight's share of epoch_size, rounded by largest remainder so the quotas sum to epoch_size),
// so a source's progress after e epochs is e * quota: pure, without replaying earlier epochs.
// Each source walks its own permutation (CounterRng stream kStreamMixtureSource, keyed by the
// source's index and its own epoch counter) and starts the next one when it runs out, so an
// up-weighted small source repeats within a job epoch and a down-weighted large one is
// visited in part, each of its samples once per source epoch. Where its quota falls in the
// epoch is a random interleave (shuffle) or a smooth round-robin (shuffle: false).
#pragma once

#include <cstdint>
#include <vector>

namespace stoker::sampler {

struct MixtureSource {
  std::uint32_t offset = 0;  // first global id
  std::uint32_t size = 0;    // samples (> 0)
  double weight = 1;         // > 0; relative to the other sources' weights
};

struct Mixture {
  std::vector<MixtureSource> sources;
  std::uint64_t epoch_size = 0;  // positions per job epoch (> 0)
};

// Positions of the epoch that source s takes, every epoch; they sum to epoch_size.
std::vector<std::uint64_t> mixture_quotas(const Mixture& m);

// The source's own epoch counter at the start of job epoch `epoch` (how many times it has
// been walked through entirely before), and at its end (exclusive progress).
std::uint64_t source_epoch_at(const Mixture& m, std::size_t source, std::uint64_t epoch);

// The epoch's list of global sample ids, epoch_size long.
// `tag_visits`: each id also carries the source epoch of that visit, as
// id + total * (source epoch mod visit_tags(m)), total = the sources' summed sizes, so that two
// visits of one sample in an epoch (an up-weighted source) can be told apart: the job keys a
// sample's augmentation draw by it. untag() gives the sample id back.
std::vector<std::uint32_t> mixture_order(const Mixture& m, bool shuffle, std::uint64_t seed, std::uint64_t epoch,
                                         bool tag_visits = false);

// Sample ids of all sources together (the global id space's size).
std::uint64_t mixture_total(const Mixture& m);
// Distinct tags an id can carry: floor((2^32 - 1) / total), at least 1.
std::uint64_t visit_tags(const Mixture& m);
inline std::uint32_t untag(const Mixture& m, std::uint32_t tagged) {
  return static_cast<std::uint32_t>(tagged % mixture_total(m));
}

// Which source a global id belongs to (sources sorted by offset, as built).
std::size_t source_of(const Mixture& m, std::uint32_t id);

}  // namespace stoker::sampler
