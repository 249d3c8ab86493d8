// The names of SampleErrorKind and ImageFormat as status, metrics and logs print them.
#include "image/sample_result.hpp"

namespace stoker::image {

const char* to_string(SampleErrorKind k) {
  switch (k) {
    case SampleErrorKind::kNone: return "ok";
    case SampleErrorKind::kIo: return "io";
    case SampleErrorKind::kUnsupported: return "unsupported";
    case SampleErrorKind::kCorrupt: return "corrupt";
    case SampleErrorKind::kTruncated: return "truncated";
    case SampleErrorKind::kTooLarge: return "too_large";
  }
  return "unknown";
}

const char* to_string(ImageFormat f) {
  switch (f) {
    case ImageFormat::kUnknown: return "unknown";
    case ImageFormat::kJpeg: return "jpeg";
    case ImageFormat::kPng: return "png";
    case ImageFormat::kWebp: return "webp";
    case ImageFormat::kTiff: return "tiff";
    case ImageFormat::kBmp: return "bmp";
    case ImageFormat::kPnm: return "pnm";
  }
  return "unknown";
}

}  // namespace stoker::image
