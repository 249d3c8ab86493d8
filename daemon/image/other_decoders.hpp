// Decoders for the formats of torchvision's IMG_EXTENSIONS beyond JPEG and PNG: WebP (lossy,
// lossless, alpha; libwebp), TIFF (libtiff: 8/16-bit RGB, gray, palette; LZW, Deflate,
// PackBits; first page), BMP (8-bit palette, 24, 32-bit; bottom-up and top-down) and binary
// PPM/PGM (P6/P5, maxval up to 65535). Each is chosen by the file's content, never its name,
// and decodes the whole image to interleaved RGB8, which then takes the same resample path as
// PNG; except WebP in the sample processor, which decodes only the window a sample needs at a
// reduced scale (webp_header + decode_webp_window), as the JPEG path does.
//
// WebP and TIFF report their orientation (the WebP EXIF chunk, the TIFF Orientation tag) with
// the pixels still in stored order; the caller applies it as it does a JPEG's.
//
// Pixels follow PIL's `.convert("RGB")` (what torchvision's default loader does): alpha is
// dropped (not composited), palettes and gray are expanded. Deliberate difference: samples of
// more than 8 bits are *scaled* to 8 (v * 255 / maxval, rounded), where PIL clips 16-bit
// values to white.
//
// Every size is checked against `max_pixels` from the header, before any allocation.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "image/sample_result.hpp"

namespace stoker::image {

enum class OtherFormat : std::uint8_t { kWebp, kTiff, kBmp, kPnm };

// The format `data` starts like, if one of these.
bool sniff_other(std::span<const std::uint8_t> data, OtherFormat& out);

// Decodes to `rgb` (w * h * 3 bytes, stored orientation) and sets `orientation` (1..8, 1 for
// formats without one). false with `r` set (corrupt, truncated, unsupported, too large)
// otherwise; never throws for bad input.
bool decode_other(OtherFormat f, std::span<const std::uint8_t> data, std::uint64_t max_pixels,
                  std::vector<std::uint8_t>& rgb, std::uint32_t& w, std::uint32_t& h, int& orientation,
                  SampleResult& r);

// One decoder each (other_decoders.cpp dispatches).
bool decode_webp(std::span<const std::uint8_t> data, std::uint64_t max_pixels, std::vector<std::uint8_t>& rgb,
                 std::uint32_t& w, std::uint32_t& h, int& orientation, SampleResult& r);
bool decode_tiff(std::span<const std::uint8_t> data, std::uint64_t max_pixels, std::vector<std::uint8_t>& rgb,
                 std::uint32_t& w, std::uint32_t& h, int& orientation, SampleResult& r);
bool decode_bmp(std::span<const std::uint8_t> data, std::uint64_t max_pixels, std::vector<std::uint8_t>& rgb,
                std::uint32_t& w, std::uint32_t& h, SampleResult& r);
bool decode_pnm(std::span<const std::uint8_t> data, std::uint64_t max_pixels, std::vector<std::uint8_t>& rgb,
                std::uint32_t& w, std::uint32_t& h, SampleResult& r);

// WebP in two steps, for region-and-scale decoding. The header: stored size (checked against
// max_pixels) and the EXIF orientation.
struct WebpInfo {
  std::uint32_t width = 0, height = 0;
  int orientation = 1;
};
bool webp_header(std::span<const std::uint8_t> data, std::uint64_t max_pixels, WebpInfo& out, SampleResult& r);

// A window [x0, x1) x [y0, y1) of stored pixels (non-empty, inside the image; x0 and y0 even,
// since libwebp moves a lossy image's odd crop origin down to even), written as
// scaled_w x scaled_h pixels by libwebp's area-averaging rescaler when scaled_w > 0, else at
// full resolution.
struct WebpWindow {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  int scaled_w = 0, scaled_h = 0;
};
// `rgb` gets the window's pixels, tightly packed RGB rows.
bool decode_webp_window(std::span<const std::uint8_t> data, const WebpWindow& win, std::vector<std::uint8_t>& rgb,
                        SampleResult& r);

// Sets `r` to an error of `kind` with `reason` and returns false (for the decoders).
inline bool refuse(SampleResult& r, SampleErrorKind kind, std::string reason) {
  r.error = kind;
  r.reason = std::move(reason);
  return false;
}

// The "too large" refusal, shared wording with the JPEG and PNG paths.
bool too_large(SampleResult& r, const char* format, std::uint64_t w, std::uint64_t h, std::uint64_t max_pixels);

}  // namespace stoker::image
