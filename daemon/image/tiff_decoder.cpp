// TIFF through libtiff, read from memory: the first page, any photometric libtiff's RGBA
// interface handles (RGB, gray, palette, YCbCr; 8 or 16 bits per sample, scaled to 8), any
// compression built into Debian's libtiff (LZW, Deflate, PackBits, JPEG...).
// Pixels come out in stored order whatever the Orientation tag says, and the tag is handed to
// the caller, which applies it like a JPEG's EXIF orientation (or not: PIL does not).
// Alpha is dropped the way PIL's convert("RGB") drops it: the stored colour values, never
// premultiplied (libtiff's RGBA interface would premultiply unassociated alpha).
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
                 std::uint32_t& w, std::uint32_t& h, int& orientation, SampleResult& r) {
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
  std::uint16_t stored = ORIENTATION_TOPLEFT;
  TIFFGetFieldDefaulted(tif, TIFFTAG_ORIENTATION, &stored);
  orientation = stored >= 1 && stored <= 8 ? stored : 1;
  // Unassociated alpha relabelled associated (in memory only): libtiff then passes the colour
  // samples through instead of multiplying them by alpha.
  std::uint16_t extra_count = 0;
  std::uint16_t* extra = nullptr;
  if (TIFFGetField(tif, TIFFTAG_EXTRASAMPLES, &extra_count, &extra) && extra_count > 0 &&
      extra[0] == EXTRASAMPLE_UNASSALPHA) {
    std::vector<std::uint16_t> relabelled(extra, extra + extra_count);
    relabelled[0] = EXTRASAMPLE_ASSOCALPHA;
    TIFFSetField(tif, TIFFTAG_EXTRASAMPLES, extra_count, relabelled.data());
  }
  std::vector<std::uint32_t> raster(std::size_t{w} * h);
  // Asking for the file's own orientation makes libtiff flip nothing: stored order, top row first.
  if (!TIFFReadRGBAImageOriented(tif, w, h, raster.data(), orientation, 0)) {
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
