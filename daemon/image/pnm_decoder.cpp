// Binary PGM (P5) and PPM (P6), written by hand: header tokens with comments, maxval 1..65535
// (two big-endian bytes per sample above 255). Samples are scaled to 8 bits when maxval is
// not 255 with PIL's own arithmetic (PpmDecoder: min(255, round(v / maxval * 255)) in double
// precision, half to even), so maxval < 255 gives PIL's pixels exactly; above 255 PIL clips
// instead (see other_decoders.hpp). Gray is expanded to RGB.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "image/other_decoders.hpp"

namespace stoker::image {
namespace {

// Next whitespace-separated decimal token of the header, skipping '#' comments; false if none.
bool next_number(std::span<const std::uint8_t> d, std::size_t& at, std::uint64_t& out) {
  while (at < d.size()) {
    if (d[at] == '#') {
      while (at < d.size() && d[at] != '\n' && d[at] != '\r') ++at;
    } else if (d[at] == ' ' || d[at] == '\t' || d[at] == '\n' || d[at] == '\r' || d[at] == '\v' || d[at] == '\f') {
      ++at;
    } else {
      break;
    }
  }
  std::size_t digits = 0;
  out = 0;
  while (at < d.size() && d[at] >= '0' && d[at] <= '9' && digits < 10) {
    out = out * 10 + (d[at] - '0');
    ++at;
    ++digits;
  }
  return digits > 0;
}

}  // namespace

bool decode_pnm(std::span<const std::uint8_t> d, std::uint64_t max_pixels, std::vector<std::uint8_t>& rgb,
                std::uint32_t& w, std::uint32_t& h, SampleResult& r) {
  const bool color = d[1] == '6';
  std::size_t at = 2;
  std::uint64_t width = 0, height = 0, maxval = 0;
  if (!next_number(d, at, width) || !next_number(d, at, height) || !next_number(d, at, maxval)) {
    return refuse(r, at >= d.size() ? SampleErrorKind::kTruncated : SampleErrorKind::kCorrupt, "PNM: invalid header");
  }
  if (width == 0 || height == 0 || width > 0xffffffffu || height > 0xffffffffu) {
    return refuse(r, SampleErrorKind::kCorrupt, "PNM: invalid size");
  }
  if (maxval == 0 || maxval > 65535) return refuse(r, SampleErrorKind::kCorrupt, "PNM: maxval must be 1..65535");
  if (at >= d.size()) return refuse(r, SampleErrorKind::kTruncated, "PNM: premature end of header");
  ++at;  // exactly one whitespace byte ends the header
  w = static_cast<std::uint32_t>(width);
  h = static_cast<std::uint32_t>(height);
  if (width * height > max_pixels) return too_large(r, "PNM", width, height, max_pixels);
  const std::uint64_t channels = color ? 3 : 1, bytes = maxval > 255 ? 2 : 1;
  const std::uint64_t need = width * height * channels * bytes;
  if (d.size() - at < need) return refuse(r, SampleErrorKind::kTruncated, "PNM: premature end of pixel data");
  rgb.resize(std::size_t{w} * h * 3);
  const std::uint8_t* p = d.data() + at;
  const std::size_t n = std::size_t{w} * h;
  if (maxval == 255 && color) {
    std::memcpy(rgb.data(), p, n * 3);  // already what we want: the common PPM
    return true;
  }
  // Every sample value through one table: 8-bit values map to themselves at maxval 255, else
  // PIL's arithmetic once per value, not once per sample (nearbyint in the default rounding
  // mode is Python's round(): half to even). Values above maxval are white, as in PIL.
  // One table per worker thread, rebuilt only when maxval changes.
  thread_local std::vector<std::uint8_t> lut;
  thread_local std::uint64_t lut_maxval = 0;
  if (lut_maxval != maxval) {
    lut.resize(65536);
    for (std::size_t v = 0; v < lut.size(); ++v) {
      lut[v] = maxval == 255 ? static_cast<std::uint8_t>(std::min<std::size_t>(v, 255))
                             : static_cast<std::uint8_t>(std::min(
                                   255.0, std::nearbyint(static_cast<double>(v) / static_cast<double>(maxval) * 255.0)));
    }
    lut_maxval = maxval;
  }
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t c = 0; c < 3; ++c) {
      const std::size_t k = (i * channels + (color ? c : 0)) * bytes;
      rgb[3 * i + c] = lut[bytes == 2 ? (p[k] << 8) | p[k + 1] : p[k]];
    }
  }
  return true;
}

}  // namespace stoker::image
