// Finished samples of a deterministic pipeline (resize + center crop: the same pixels every
// epoch), kept in RAM so that later epochs copy them instead of reading and decoding.
//
// Admission, not eviction: samples are admitted until the byte budget is full and then stay.
// Epochs visit every sample once each, so an LRU cache smaller than the dataset would evict
// each sample shortly before its next use and hit (almost) never; a fixed set of admitted
// samples hits budget/dataset_bytes of every epoch after the first.
//
// Threads: any worker may get() and put() at once, lock-free. Invariant: an entry, once
// published, is never changed or freed before the cache is destroyed (with its job).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace stoker::job {

struct SampleCacheStats {
  std::uint64_t budget_bytes = 0, used_bytes = 0, entries = 0, hits = 0, misses = 0;
};

class SampleCache {
 public:
  // `samples`: ids are 0..samples-1; every entry is `sample_bytes` long.
  SampleCache(std::uint64_t budget_bytes, std::size_t samples, std::uint64_t sample_bytes);
  ~SampleCache();
  SampleCache(const SampleCache&) = delete;
  SampleCache& operator=(const SampleCache&) = delete;

  // Copies sample `id` to `out` when it is cached.
  bool get(std::uint32_t id, std::uint8_t* out);
  // Keeps a copy of `bytes` if the budget has room for it (a no-op once full or cached).
  void put(std::uint32_t id, const std::uint8_t* bytes);
  SampleCacheStats stats() const;

 private:
  const std::uint64_t budget_;
  const std::uint64_t sample_bytes_;
  const std::size_t samples_;
  std::unique_ptr<std::atomic<std::uint8_t*>[]> entries_;  // by sample id; null: not cached
  std::atomic<std::uint64_t> used_{0}, count_{0}, hits_{0}, misses_{0};
};

}  // namespace stoker::job
