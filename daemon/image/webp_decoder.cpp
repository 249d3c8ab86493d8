// WebP through libwebp: lossy, lossless and with alpha (dropped, as PIL's convert("RGB")).
// The header pass reads the size and the EXIF orientation (libwebpdemux finds the EXIF chunk);
// the decode asks libwebp for only a window of the image, optionally reduced by its own
// rescaler (WebPDecoderConfig use_cropping / use_scaling): the WebP counterpart of the JPEG
// path's ROI + DCT scaling. Cropping alone gives the same pixels as a full decode (libwebp
// filters and upsamples the margin it needs); scaling is an area average, like a DCT scale.
#include <webp/decode.h>
#include <webp/demux.h>

#include "image/exif.hpp"
#include "image/other_decoders.hpp"

namespace stoker::image {
namespace {

// The EXIF chunk's orientation, 1 when there is none. libwebpdemux validates the container
// (chunk sizes within the data) before handing out a chunk.
int webp_orientation(std::span<const std::uint8_t> data) {
  const WebPData whole{data.data(), data.size()};
  WebPDemuxer* dmux = WebPDemux(&whole);
  if (dmux == nullptr) return 1;
  int orientation = 1;
  if (WebPDemuxGetI(dmux, WEBP_FF_FORMAT_FLAGS) & EXIF_FLAG) {
    WebPChunkIterator it;
    if (WebPDemuxGetChunk(dmux, "EXIF", 1, &it)) {
      orientation = exif_orientation_tiff(it.chunk.bytes, it.chunk.size);
      WebPDemuxReleaseChunkIterator(&it);
    }
  }
  WebPDemuxDelete(dmux);
  return orientation;
}

}  // namespace

bool webp_header(std::span<const std::uint8_t> data, std::uint64_t max_pixels, WebpInfo& out, SampleResult& r) {
  WebPBitstreamFeatures f;
  const VP8StatusCode st = WebPGetFeatures(data.data(), data.size(), &f);
  if (st == VP8_STATUS_NOT_ENOUGH_DATA) return refuse(r, SampleErrorKind::kTruncated, "WebP: premature end of data");
  if (st != VP8_STATUS_OK || f.width <= 0 || f.height <= 0) return refuse(r, SampleErrorKind::kCorrupt, "WebP: invalid header");
  if (f.has_animation) return refuse(r, SampleErrorKind::kUnsupported, "animated WebP is not supported");
  out.width = static_cast<std::uint32_t>(f.width);
  out.height = static_cast<std::uint32_t>(f.height);
  if (std::uint64_t{out.width} * out.height > max_pixels) return too_large(r, "WebP", out.width, out.height, max_pixels);
  out.orientation = webp_orientation(data);
  return true;
}

bool decode_webp_window(std::span<const std::uint8_t> data, const WebpWindow& win, std::vector<std::uint8_t>& rgb,
                        SampleResult& r) {
  // The caller's window lies inside the image the header described (its invariant); the
  // output size is what libwebp writes: the window, or its scaled size.
  const int ow = win.scaled_w > 0 ? win.scaled_w : win.x1 - win.x0;
  const int oh = win.scaled_h > 0 ? win.scaled_h : win.y1 - win.y0;
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) return refuse(r, SampleErrorKind::kUnsupported, "WebP: libwebp version mismatch");
  config.options.use_cropping = 1;
  config.options.crop_left = win.x0;
  config.options.crop_top = win.y0;
  config.options.crop_width = win.x1 - win.x0;
  config.options.crop_height = win.y1 - win.y0;
  if (win.scaled_w > 0) {
    config.options.use_scaling = 1;
    config.options.scaled_width = ow;
    config.options.scaled_height = oh;
  }
  rgb.resize(static_cast<std::size_t>(ow) * oh * 3);
  // Into our buffer: no allocation by libwebp beyond its decoder state.
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = rgb.data();
  config.output.u.RGBA.stride = ow * 3;
  config.output.u.RGBA.size = rgb.size();
  const VP8StatusCode st = WebPDecode(data.data(), data.size(), &config);
  WebPFreeDecBuffer(&config.output);  // nothing to free with external memory; kept for symmetry
  if (st == VP8_STATUS_NOT_ENOUGH_DATA) return refuse(r, SampleErrorKind::kTruncated, "WebP: premature end of data");
  if (st != VP8_STATUS_OK) return refuse(r, SampleErrorKind::kCorrupt, "WebP: the bitstream does not decode");
  return true;
}

bool decode_webp(std::span<const std::uint8_t> data, std::uint64_t max_pixels, std::vector<std::uint8_t>& rgb,
                 std::uint32_t& w, std::uint32_t& h, int& orientation, SampleResult& r) {
  WebpInfo info;
  if (!webp_header(data, max_pixels, info, r)) return false;
  w = info.width;
  h = info.height;
  orientation = info.orientation;
  return decode_webp_window(data, WebpWindow{0, 0, static_cast<int>(w), static_cast<int>(h)}, rgb, r);
}

}  // namespace stoker::image
