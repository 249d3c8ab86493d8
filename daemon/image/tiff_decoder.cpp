// TIFF through libtiff, read from memory: the first page, any photometric libtiff's RGBA
// interface handles (RGB, gray, palette, YCbCr; 8 or 16 bits per sample, scaled to 8), any
// compression built into Debian's libtiff (LZW, Deflate, PackBits, JPEG...).
#include <tiffio.h>

#include <algorithm>
#include <cstdarg>
#include <cstring>
#include <mutex>

#include "image/other_decoders.hpp"

namespace stoker::image {
namespace {

struct Memory {
  const std::uint8_t* data;
  toff_t size, pos;
};

tsize_t read_proc(thandle_t h, tdata_t buf, tsize_t n) {
  auto* m = static_cast<Memory*>(h);
  const toff_t left = m->pos < m->size ? m->size - m->pos : 0;
  const toff_t k = std::min<toff_t>(left, static_cast<toff_t>(n));
  std::memcpy(buf, m->data + m->pos, k);
  m->pos += k;
  return static_cast<tsize_t>(k);
}
tsize_t write_proc(thandle_t, tdata_t, tsize_t) { return -1; }
toff_t seek_proc(thandle_t h, toff_t off, int whence) {
  auto* m = static_cast<Memory*>(h);
  const toff_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : m->size;
  m->pos = base + off;
  return m->pos;
}
int close_proc(thandle_t) { return 0; }
toff_t size_proc(thandle_t h) { return static_cast<Memory*>(h)->size; }
int map_proc(thandle_t, tdata_t*, toff_t*) { return 0; }
void unmap_proc(thandle_t, tdata_t, toff_t) {}

// libtiff reports through process-wide handlers: keep them quiet (the result says what went
// wrong) and set them once.
void quiet(const char*, const char*, va_list) {}
void install_quiet_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    TIFFSetErrorHandler(quiet);
    TIFFSetWarningHandler(quiet);
  });
}

}  // namespace

bool decode_tiff(std::span<const std::uint8_t> data, std::uint64_t max_pixels, std::vector<std::uint8_t>& rgb,
                 std::uint32_t& w, std::uint32_t& h, SampleResult& r) {
  install_quiet_handlers();
  Memory m{data.data(), static_cast<toff_t>(data.size()), 0};
  TIFF* tif = TIFFClientOpen("memory", "rm", &m, read_proc, write_proc, seek_proc, close_proc, size_proc,
                             map_proc, unmap_proc);
  if (tif == nullptr) return refuse(r, SampleErrorKind::kCorrupt, "TIFF: invalid header");
  struct Closer {
    TIFF* t;
    ~Closer() { TIFFClose(t); }
  } closer{tif};
  uint32_t tw = 0, th = 0;
  if (!TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &tw) || !TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &th) || tw == 0 || th == 0) {
    return refuse(r, SampleErrorKind::kCorrupt, "TIFF: no image size");
  }
  w = tw;
  h = th;
  if (std::uint64_t{w} * h > max_pixels) return too_large(r, "TIFF", w, h, max_pixels);
  char why[1024] = {};
  if (!TIFFRGBAImageOK(tif, why)) return refuse(r, SampleErrorKind::kUnsupported, std::string("TIFF: ") + why);
  std::vector<std::uint32_t> raster(std::size_t{w} * h);
  if (!TIFFReadRGBAImageOriented(tif, w, h, raster.data(), ORIENTATION_TOPLEFT, 0)) {
    return refuse(r, m.pos >= m.size ? SampleErrorKind::kTruncated : SampleErrorKind::kCorrupt,
                  "TIFF: the image data does not decode");
  }
  rgb.resize(std::size_t{w} * h * 3);
  for (std::size_t i = 0; i < raster.size(); ++i) {
    rgb[3 * i] = static_cast<std::uint8_t>(TIFFGetR(raster[i]));
    rgb[3 * i + 1] = static_cast<std::uint8_t>(TIFFGetG(raster[i]));
    rgb[3 * i + 2] = static_cast<std::uint8_t>(TIFFGetB(raster[i]));
  }
  return true;
}

}  // namespace stoker::image
