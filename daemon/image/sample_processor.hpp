// Turns one encoded file into one finished sample written straight into a batch slot.
// One SampleProcessor per worker thread: it owns the decoder state and scratch buffers, so
// the hot path allocates nothing once warmed up.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "image/pipeline_spec.hpp"
#include "image/sample_result.hpp"

namespace stoker::image {

// Per-stage wall time, accumulated when a Breakdown is passed (benchmarks only).
struct Breakdown {
  double header_s = 0, decode_s = 0, resize_s = 0, write_s = 0;
  std::uint64_t samples = 0;
};

class SampleProcessor {
 public:
  explicit SampleProcessor(const PipelineSpec& spec);
  ~SampleProcessor();
  SampleProcessor(const SampleProcessor&) = delete;
  SampleProcessor& operator=(const SampleProcessor&) = delete;

  // Decodes `encoded` (format sniffed from content, never the extension), applies the
  // geometry and augmentation drawn from CounterRng(seed, epoch, sample_id, kStreamAugment),
  // and writes spec.sample_bytes() bytes to `out` in the spec's dtype and layout.
  // Never throws for bad input; on error `out` is left unspecified.
  SampleResult process(std::span<const std::uint8_t> encoded, std::uint64_t seed,
                       std::uint64_t epoch, std::uint64_t sample_id, void* out,
                       Breakdown* breakdown = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::image
