// WebP through libwebp: lossy, lossless and with alpha (dropped, as PIL's convert("RGB")).
#include <webp/decode.h>

#include "image/other_decoders.hpp"

namespace stoker::image {

bool decode_webp(std::span<const std::uint8_t> data, std::uint64_t max_pixels, std::vector<std::uint8_t>& rgb,
                 std::uint32_t& w, std::uint32_t& h, SampleResult& r) {
  WebPBitstreamFeatures f;
  const VP8StatusCode st = WebPGetFeatures(data.data(), data.size(), &f);
  if (st == VP8_STATUS_NOT_ENOUGH_DATA) return refuse(r, SampleErrorKind::kTruncated, "WebP: premature end of data");
  if (st != VP8_STATUS_OK || f.width <= 0 || f.height <= 0) return refuse(r, SampleErrorKind::kCorrupt, "WebP: invalid header");
  if (f.has_animation) return refuse(r, SampleErrorKind::kUnsupported, "animated WebP is not supported");
  w = static_cast<std::uint32_t>(f.width);
  h = static_cast<std::uint32_t>(f.height);
  if (std::uint64_t{w} * h > max_pixels) return too_large(r, "WebP", w, h, max_pixels);
  rgb.resize(std::size_t{w} * h * 3);
  // Into our buffer: no allocation by libwebp beyond its decoder state.
  if (WebPDecodeRGBInto(data.data(), data.size(), rgb.data(), rgb.size(), static_cast<int>(w) * 3) == nullptr) {
    return refuse(r, SampleErrorKind::kCorrupt, "WebP: the bitstream does not decode");
  }
  return true;
}

}  // namespace stoker::image
