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

// An image reduced for the decoded store (PipelineSpec::store_max_side): packed RGB uint8 rows
// in the file's stored orientation, with the EXIF orientation the file declares (applied, or
// not, by the spec that processes it).
struct ReducedView {
  const std::uint8_t* pixels = nullptr;  // width * height * 3 bytes
  std::uint32_t width = 0, height = 0;
  int orientation = 1;
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

  // Decoded-store pipeline (spec.store_max_side > 0), in its two halves; process() is
  // reduce() then process_reduced() for such a spec.
  // Decodes `encoded` and reduces it so the longer side is at most store_max_side (never
  // enlarged). The view stays valid until the next call on this processor.
  SampleResult reduce(std::span<const std::uint8_t> encoded, ReducedView& out);
  // The geometry, augmentation and write of process(), from a reduced image.
  SampleResult process_reduced(const ReducedView& image, std::uint64_t seed, std::uint64_t epoch,
                               std::uint64_t sample_id, void* out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::image
