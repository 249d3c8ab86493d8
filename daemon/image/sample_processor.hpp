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

namespace stoker::image {

enum class SampleErrorKind : std::uint8_t {
  kNone = 0,
  kIo,           // could not read the file
  kUnsupported,  // a format or variant we do not decode (12-bit JPEG, BMP, text, ...)
  kCorrupt,      // entropy data or structure too broken to decode
  kTruncated,    // premature end of data
  kTooLarge,     // header claims more than max_pixels
};

const char* to_string(SampleErrorKind k);

// What a file is by its content (its first bytes), whatever its name says.
enum class ImageFormat : std::uint8_t { kUnknown = 0, kJpeg, kPng, kWebp, kTiff, kBmp, kPnm };
inline constexpr int kImageFormats = 7;
const char* to_string(ImageFormat f);  // "unknown", "jpeg", "png", "webp", "tiff", "bmp", "pnm"

struct SampleResult {
  SampleErrorKind error = SampleErrorKind::kNone;
  ImageFormat format = ImageFormat::kUnknown;  // set once the content was sniffed (also on errors)
  std::string reason;          // empty when ok; human readable ("12-bit JPEG is not supported")
  std::uint32_t warnings = 0;  // recoverable decoder warnings that were tolerated
  bool ok() const { return error == SampleErrorKind::kNone; }
};

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
