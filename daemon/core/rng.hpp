// Counter-based randomness: every random choice about a sample is a pure function of
// (seed, epoch, sample id, stream), never of which worker thread ran first. This is what
// makes batches bit-identical whatever the worker count, and resume exact.
#pragma once

#include <cstdint>

namespace stoker {

constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A small generator keyed by (seed, epoch, id, stream); `stream` separates independent uses
// (e.g. the epoch permutation vs. per-sample augmentation) of the same key.
class CounterRng {
 public:
  constexpr CounterRng(std::uint64_t seed, std::uint64_t epoch, std::uint64_t id,
                       std::uint64_t stream = 0)
      : key_(splitmix64(splitmix64(splitmix64(seed ^ 0x5354'4f4bull) ^ epoch) ^ id) ^
             splitmix64(stream)) {}

  constexpr std::uint64_t next_u64() { return splitmix64(key_ + 0x9e3779b97f4a7c15ull * ++counter_); }

  // Uniform in [0, 1) with 53 bits.
  constexpr double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

  constexpr double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

  // Uniform integer in [0, n) (n > 0), without modulo bias worth caring about for n < 2^32.
  constexpr std::uint64_t below(std::uint64_t n) {
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(next_u64()) * n) >> 64);
  }

 private:
  std::uint64_t key_;
  std::uint64_t counter_ = 0;
};

// Fisher-Yates over [first, last): every shuffled order of the sampler (an epoch's
// permutation, a mixture's sources and interleave, a window of shards) draws through this one
// walk, so the same (key, range) gives the same order wherever it is asked for. The draws:
// for i = size .. 2, swap [i-1] with [below(i)]. Changing them changes every user's batches.
template <class T>
constexpr void shuffle_in_place(T* first, T* last, CounterRng& rng) {
  for (auto i = static_cast<std::uint64_t>(last - first); i > 1; --i) {
    T* const a = first + (i - 1);
    T* const b = first + rng.below(i);
    const T t = *a;
    *a = *b;
    *b = t;
  }
}

// Streams in use; append, never renumber (renumbering changes every user's batches).
inline constexpr std::uint64_t kStreamPermutation = 1;
inline constexpr std::uint64_t kStreamAugment = 2;
inline constexpr std::uint64_t kStreamColor = 3;  // colour steps (color_ops.hpp)
inline constexpr std::uint64_t kStreamErasing = 4;  // random_erasing on the normalized output
// MixUp/CutMix, one draw per batch keyed (seed, epoch, batch index) with the global rank in
// the stream's upper half (job/batch_mix.hpp); far from the small numbers so that steps
// appended meanwhile cannot collide with it.
inline constexpr std::uint64_t kStreamBatchMix = 0x6d6978;  // "mix"
// Mixtures of sources (sampler/mixture.hpp): where each source's share falls in an epoch
// (keyed (seed, epoch, 0)), and each source's own permutation (keyed (seed, source epoch,
// source index)). Far from the small numbers for the same reason.
inline constexpr std::uint64_t kStreamMixtureInterleave = 0x6d78696c;  // "mxil"
inline constexpr std::uint64_t kStreamMixtureSource = 0x6d787372;      // "mxsr"
// shuffle: {window_shards: N} (sampler/window_order.hpp): the order of the shards (keyed
// (seed, epoch, 0)) and of the samples within each window (keyed (seed, epoch, 1 + window)).
inline constexpr std::uint64_t kStreamWindowShards = 0x77696e64;  // "wind"

}  // namespace stoker
