#include "job/sample_cache.hpp"

#include <cstring>
#include <new>

namespace stoker::job {

SampleCache::SampleCache(std::uint64_t budget_bytes, std::size_t samples, std::uint64_t sample_bytes)
    : budget_(budget_bytes),
      sample_bytes_(sample_bytes),
      samples_(samples),
      entries_(std::make_unique<std::atomic<std::uint8_t*>[]>(samples)) {
  for (std::size_t i = 0; i < samples; ++i) entries_[i].store(nullptr, std::memory_order_relaxed);
}

SampleCache::~SampleCache() {
  for (std::size_t i = 0; i < samples_; ++i) delete[] entries_[i].load(std::memory_order_relaxed);
}

bool SampleCache::get(std::uint32_t id, std::uint8_t* out) {
  const std::uint8_t* e = id < samples_ ? entries_[id].load(std::memory_order_acquire) : nullptr;
  if (e == nullptr) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  std::memcpy(out, e, sample_bytes_);
  hits_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void SampleCache::put(std::uint32_t id, const std::uint8_t* bytes) {
  if (id >= samples_ || entries_[id].load(std::memory_order_relaxed) != nullptr) return;
  // Reserve the bytes first, so concurrent puts can never take the cache over its budget.
  if (used_.fetch_add(sample_bytes_, std::memory_order_relaxed) + sample_bytes_ > budget_) {
    used_.fetch_sub(sample_bytes_, std::memory_order_relaxed);
    return;
  }
  auto* copy = new (std::nothrow) std::uint8_t[sample_bytes_];
  if (copy == nullptr) {  // out of memory: the cache is an optimisation, not a promise
    used_.fetch_sub(sample_bytes_, std::memory_order_relaxed);
    return;
  }
  std::memcpy(copy, bytes, sample_bytes_);
  std::uint8_t* expected = nullptr;
  if (entries_[id].compare_exchange_strong(expected, copy, std::memory_order_release)) {
    count_.fetch_add(1, std::memory_order_relaxed);
  } else {  // another worker cached the same sample first (a sample in two ranks' batches)
    delete[] copy;
    used_.fetch_sub(sample_bytes_, std::memory_order_relaxed);
  }
}

SampleCacheStats SampleCache::stats() const {
  SampleCacheStats s;
  s.budget_bytes = budget_;
  s.used_bytes = used_.load(std::memory_order_relaxed);
  s.entries = count_.load(std::memory_order_relaxed);
  s.hits = hits_.load(std::memory_order_relaxed);
  s.misses = misses_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace stoker::job
