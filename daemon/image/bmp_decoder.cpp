// BMP, written by hand (small, and fuzzed): BITMAPINFOHEADER and its successors (V4, V5) and
// the OS/2 core header; 8-bit palette (and 1/4-bit), 24-bit, 32-bit (BI_RGB or BI_BITFIELDS
// with byte-aligned masks); bottom-up or top-down. RLE-compressed BMPs are refused as
// unsupported. Every read is bounds-checked against the file.
#include <cstring>
#include <string>

#include "image/other_decoders.hpp"

namespace stoker::image {
namespace {

std::uint32_t le32(const std::uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (std::uint32_t{p[3]} << 24); }
std::uint16_t le16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }

// Shift of a byte-aligned 8-bit channel mask (0x00ff0000 -> 16), or -1.
int mask_shift(std::uint32_t mask) {
  for (int s = 0; s <= 24; s += 8) {
    if (mask == (0xffu << s)) return s;
  }
  return -1;
}

}  // namespace

bool decode_bmp(std::span<const std::uint8_t> d, std::uint64_t max_pixels, std::vector<std::uint8_t>& rgb,
                std::uint32_t& w, std::uint32_t& h, SampleResult& r) {
  if (d.size() < 26) return refuse(r, SampleErrorKind::kTruncated, "BMP: premature end of header");
  const std::uint32_t pixel_offset = le32(d.data() + 10);
  const std::uint32_t dib = le32(d.data() + 14);
  std::int64_t width = 0, height = 0;
  std::uint32_t bpp = 0, compression = 0, colors = 0;
  std::size_t palette_entry = 4;
  std::uint32_t masks[3] = {0x00ff0000u, 0x0000ff00u, 0x000000ffu};
  if (dib == 12) {  // OS/2 BITMAPCOREHEADER
    width = le16(d.data() + 18);
    height = le16(d.data() + 20);
    bpp = le16(d.data() + 24);
    palette_entry = 3;
  } else if (dib >= 40 && d.size() >= 14 + 40) {
    width = static_cast<std::int32_t>(le32(d.data() + 18));
    height = static_cast<std::int32_t>(le32(d.data() + 22));
    bpp = le16(d.data() + 28);
    compression = le32(d.data() + 30);
    colors = le32(d.data() + 46);
    if (compression == 3 || compression == 6) {  // BI_BITFIELDS / BI_ALPHABITFIELDS
      const std::size_t at = dib >= 52 ? 14 + 40 : 14 + dib;  // in the header (V2+) or after it
      if (d.size() < at + 12) return refuse(r, SampleErrorKind::kTruncated, "BMP: premature end of bit masks");
      for (int i = 0; i < 3; ++i) masks[i] = le32(d.data() + at + 4 * i);
    }
  } else {
    return refuse(r, dib >= 40 ? SampleErrorKind::kTruncated : SampleErrorKind::kUnsupported,
                  "BMP: header of " + std::to_string(dib) + " bytes is not supported");
  }
  const bool top_down = height < 0;
  if (top_down) height = -height;
  if (width <= 0 || height <= 0) return refuse(r, SampleErrorKind::kCorrupt, "BMP: invalid size");
  w = static_cast<std::uint32_t>(width);
  h = static_cast<std::uint32_t>(height);
  if (std::uint64_t{w} * h > max_pixels) return too_large(r, "BMP", w, h, max_pixels);
  if (compression == 1 || compression == 2) return refuse(r, SampleErrorKind::kUnsupported, "RLE-compressed BMP is not supported");
  if (compression != 0 && compression != 3 && compression != 6) {
    return refuse(r, SampleErrorKind::kUnsupported, "BMP compression " + std::to_string(compression) + " is not supported");
  }
  if (bpp != 1 && bpp != 4 && bpp != 8 && bpp != 24 && bpp != 32) {
    return refuse(r, SampleErrorKind::kUnsupported, std::to_string(bpp) + "-bit BMP is not supported");
  }
  int shift[3] = {16, 8, 0};
  if (bpp == 32) {
    for (int i = 0; i < 3; ++i) {
      shift[i] = mask_shift(masks[i]);
      if (shift[i] < 0) return refuse(r, SampleErrorKind::kUnsupported, "BMP bit masks other than whole bytes are not supported");
    }
  }
  // Palette (indexed BMPs): right after the header.
  std::vector<std::uint8_t> palette;  // RGB triples
  if (bpp <= 8) {
    const std::size_t n = colors != 0 && colors <= (1u << bpp) ? colors : (1u << bpp);
    const std::size_t at = 14 + dib;
    if (d.size() < at + n * palette_entry) return refuse(r, SampleErrorKind::kTruncated, "BMP: premature end of palette");
    palette.resize(256 * 3, 0);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint8_t* e = d.data() + at + i * palette_entry;  // B, G, R[, reserved]
      palette[3 * i] = e[2];
      palette[3 * i + 1] = e[1];
      palette[3 * i + 2] = e[0];
    }
  }
  const std::uint64_t stride = ((std::uint64_t{w} * bpp + 31) / 32) * 4;
  if (pixel_offset > d.size() || d.size() - pixel_offset < stride * h) {
    return refuse(r, SampleErrorKind::kTruncated, "BMP: premature end of pixel data");
  }
  rgb.resize(std::size_t{w} * h * 3);
  for (std::uint32_t y = 0; y < h; ++y) {
    const std::uint8_t* row = d.data() + pixel_offset + stride * (top_down ? y : h - 1 - y);
    std::uint8_t* out = rgb.data() + std::size_t{y} * w * 3;
    for (std::uint32_t x = 0; x < w; ++x, out += 3) {
      if (bpp == 24) {
        out[0] = row[3 * x + 2];
        out[1] = row[3 * x + 1];
        out[2] = row[3 * x];
      } else if (bpp == 32) {
        const std::uint32_t v = le32(row + 4 * x);
        for (int c = 0; c < 3; ++c) out[c] = static_cast<std::uint8_t>(v >> shift[c]);
      } else {
        const std::uint32_t per_byte = 8 / bpp;
        const std::uint8_t byte = row[x / per_byte];
        const std::uint32_t index = (byte >> (8 - bpp * (x % per_byte + 1))) & ((1u << bpp) - 1);
        std::memcpy(out, palette.data() + 3 * index, 3);
      }
    }
  }
  return true;
}

}  // namespace stoker::image
