#include "image/other_decoders.hpp"

#include <cstring>
#include <string>

namespace stoker::image {

bool sniff_other(std::span<const std::uint8_t> d, OtherFormat& out) {
  auto starts = [&](const char* magic, std::size_t n, std::size_t at = 0) {
    return d.size() >= at + n && std::memcmp(d.data() + at, magic, n) == 0;
  };
  if (starts("RIFF", 4) && starts("WEBP", 4, 8)) {
    out = OtherFormat::kWebp;
  } else if (starts("II*\0", 4) || starts("MM\0*", 4)) {
    out = OtherFormat::kTiff;
  } else if (starts("BM", 2) && d.size() >= 26) {
    out = OtherFormat::kBmp;
  } else if (d.size() >= 3 && d[0] == 'P' && (d[1] == '5' || d[1] == '6') &&
             (d[2] == ' ' || d[2] == '\t' || d[2] == '\n' || d[2] == '\r' || d[2] == '#')) {
    out = OtherFormat::kPnm;
  } else {
    return false;
  }
  return true;
}

bool too_large(SampleResult& r, const char* format, std::uint64_t w, std::uint64_t h, std::uint64_t max_pixels) {
  return refuse(r, SampleErrorKind::kTooLarge,
                std::string(format) + " header claims " + std::to_string(w) + "x" + std::to_string(h) +
                    " pixels, above max_pixels " + std::to_string(max_pixels));
}

bool decode_other(OtherFormat f, std::span<const std::uint8_t> data, std::uint64_t max_pixels,
                  std::vector<std::uint8_t>& rgb, std::uint32_t& w, std::uint32_t& h, int& orientation,
                  SampleResult& r) {
  orientation = 1;
  switch (f) {
    case OtherFormat::kWebp: return decode_webp(data, max_pixels, rgb, w, h, orientation, r);
    case OtherFormat::kTiff: return decode_tiff(data, max_pixels, rgb, w, h, orientation, r);
    case OtherFormat::kBmp: return decode_bmp(data, max_pixels, rgb, w, h, r);
    case OtherFormat::kPnm: return decode_pnm(data, max_pixels, rgb, w, h, r);
  }
  return refuse(r, SampleErrorKind::kUnsupported, "unknown format");
}

}  // namespace stoker::image
