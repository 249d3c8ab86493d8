// What became of one sample: ok, or why not (SampleErrorKind plus a reason for a person), and
// the format its content was sniffed as. Its own header because the decoders, the job's
// counters and the status/metrics code use these types without needing SampleProcessor.
#pragma once

#include <cstdint>
#include <string>

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

}  // namespace stoker::image
