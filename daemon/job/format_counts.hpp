// How many of a job's samples are of each image format by content (the first bytes, whatever
// the name says), for `stokerctl status`. The scan only sees names; the content is known once
// a worker has read a file, so each sample is counted once, the first time it is read (a file
// that then fails to decode still counts as what it starts like; "unknown": none of them).
// Workers record concurrently without a lock; the figures are final once every sample has been
// read (after the first epoch, files quarantined by an earlier run aside).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "image/sample_result.hpp"

namespace stoker::job {

class FormatCounts {
 public:
  explicit FormatCounts(std::size_t samples)
      : samples_(samples), seen_(std::make_unique<std::atomic<std::uint8_t>[]>(samples)) {}

  // Sample `id` (< samples) was read and sniffed as `f`. True exactly once: when this call
  // made every sample counted (the moment to log the summary).
  bool record(std::size_t id, image::ImageFormat f) {
    if (seen_[id].exchange(1, std::memory_order_relaxed) != 0) return false;
    counts_[static_cast<std::size_t>(f)].fetch_add(1, std::memory_order_relaxed);
    return counted_.fetch_add(1, std::memory_order_relaxed) + 1 == samples_;
  }

  // By image::ImageFormat.
  std::array<std::uint64_t, image::kImageFormats> counts() const {
    std::array<std::uint64_t, image::kImageFormats> out{};
    for (std::size_t k = 0; k < out.size(); ++k) out[k] = counts_[k].load(std::memory_order_relaxed);
    return out;
  }

  // "jpeg 1281167, png 12, webp 3": the formats met, most common first.
  std::string summary() const;

 private:
  const std::size_t samples_;
  std::unique_ptr<std::atomic<std::uint8_t>[]> seen_;  // by sample id: counted already
  std::array<std::atomic<std::uint64_t>, image::kImageFormats> counts_{};
  std::atomic<std::size_t> counted_{0};
};

inline std::string FormatCounts::summary() const {
  const auto c = counts();
  std::array<std::size_t, image::kImageFormats> order{};
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return c[a] > c[b]; });
  std::string out;
  for (std::size_t k : order) {
    if (c[k] == 0) continue;
    out += (out.empty() ? "" : ", ") + std::string(image::to_string(static_cast<image::ImageFormat>(k))) + " " +
           std::to_string(c[k]);
  }
  return out;
}

}  // namespace stoker::job
