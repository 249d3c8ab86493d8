#include "image/png_decoder.hpp"

#include <csetjmp>
#include <cstring>
#include <string>

#include <png.h>

namespace stoker::image {
namespace {

struct Reader {
  const std::uint8_t* data;
  std::size_t size, pos;
  char message[256];
  bool truncated;
};

void on_read(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<Reader*>(png_get_io_ptr(png));
  if (r->size - r->pos < n) {
    r->truncated = true;
    png_error(png, "premature end of data");
  }
  std::memcpy(out, r->data + r->pos, n);
  r->pos += n;
}

void on_error(png_structp png, png_const_charp msg) {
  auto* r = static_cast<Reader*>(png_get_io_ptr(png));
  std::strncpy(r->message, msg, sizeof r->message - 1);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}

std::uint32_t be32(const std::uint8_t* p) {
  return (static_cast<std::uint32_t>(p[0]) << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
}

// The setjmp frame: returns false with `result` set when libpng reports an error. It changes
// no local of its own after setjmp; what it fills (rgb, rows, width, height, reader) belongs to
// its callers.
bool read_rows(png_structp png, png_infop info, Reader& reader, std::uint64_t max_pixels,
               std::vector<std::uint8_t>& rgb, std::vector<png_bytep>& rows, std::uint32_t& width,
               std::uint32_t& height, SampleResult& result) {
  if (setjmp(png_jmpbuf(png))) {
    result.error = reader.truncated ? SampleErrorKind::kTruncated : SampleErrorKind::kCorrupt;
    result.reason = std::string("PNG: ") + reader.message;
    return false;
  }
  png_set_chunk_cache_max(png, 1000);
  png_set_read_fn(png, &reader, on_read);
  png_read_info(png, info);
  width = png_get_image_width(png, info);
  height = png_get_image_height(png, info);
  // The caller checked the IHDR bytes against max_pixels; this is libpng's own reading of
  // them, checked again before the pixel buffer and the row pointers are allocated.
  if (static_cast<std::uint64_t>(width) * height > max_pixels) {
    result.error = SampleErrorKind::kTooLarge;
    result.reason = "PNG header claims " + std::to_string(width) + "x" + std::to_string(height) +
                    " pixels, above max_pixels " + std::to_string(max_pixels);
    return false;
  }
  const int color = png_get_color_type(png, info);
  png_set_strip_16(png);  // high byte, as PIL
  png_set_packing(png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const std::size_t stride = png_get_rowbytes(png, info);
  if (stride != static_cast<std::size_t>(width) * 3) png_error(png, "unexpected row layout after conversion");
  rgb.resize(stride * height);
  rows.resize(height);
  for (std::uint32_t y = 0; y < height; ++y) rows[y] = rgb.data() + y * stride;
  png_read_image(png, rows.data());
  return true;
}

}  // namespace

bool png_dimensions(std::span<const std::uint8_t> d, std::uint32_t& width, std::uint32_t& height) {
  // Signature (8), IHDR length (4) + type (4), then width and height.
  if (d.size() < 24 || std::memcmp(d.data() + 12, "IHDR", 4) != 0) return false;
  width = be32(d.data() + 16);
  height = be32(d.data() + 20);
  return width > 0 && height > 0;
}

bool decode_png(std::span<const std::uint8_t> data, std::uint64_t max_pixels, std::vector<std::uint8_t>& rgb,
                std::uint32_t& width, std::uint32_t& height, SampleResult& result) {
  // A chunk's length is whatever the file says, and libpng allocates an ancillary chunk's
  // claimed length before reading it (its own limit is only a warning for readers): a
  // 200-byte file claiming a 1.6 GB tEXt chunk made a worker allocate 1.6 GB (found by the
  // fuzzer; tests/data/fuzz-regressions). The whole file is in memory, so no chunk can be
  // longer than what follows it: check every length before libpng sees the file.
  for (std::size_t at = 8; at + 8 <= data.size();) {
    const std::uint64_t len = be32(data.data() + at);
    if (len > data.size() - at - 8) {
      if (std::memcmp(data.data() + at + 4, "IDAT", 4) == 0 || std::memcmp(data.data() + at + 4, "IEND", 4) == 0) {
        break;  // a truncated image: libpng says so with the rows it could read
      }
      result.error = SampleErrorKind::kCorrupt;
      result.reason = "PNG: a chunk claims " + std::to_string(len) + " bytes, more than the file holds";
      return false;
    }
    if (std::memcmp(data.data() + at + 4, "IEND", 4) == 0) break;
    at += 12 + static_cast<std::size_t>(len);
  }
  Reader reader{data.data(), data.size(), 0, {0}, false};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, on_error, on_warning);
  if (png == nullptr) {
    result.error = SampleErrorKind::kCorrupt;
    result.reason = "PNG: cannot create decoder";
    return false;
  }
  png_infop info = png_create_info_struct(png);
  // Everything the decode changes lives in this frame or the caller's, never in the frame
  // that holds setjmp: after a longjmp, a non-volatile local of the setjmp frame changed since
  // the setjmp is indeterminate. That is how the row-pointer array leaked on every corrupt
  // PNG (#13): `rows` was assigned after setjmp, the jump brought back the register's old
  // null, and png_free freed nothing. Owned here, the rows are freed however read_rows ends.
  std::vector<png_bytep> rows;
  const bool ok = read_rows(png, info, reader, max_pixels, rgb, rows, width, height, result);
  png_destroy_read_struct(&png, &info, nullptr);
  return ok;
}

}  // namespace stoker::image
