#include "image/decoder_versions.hpp"

#include <cstdio>
#include <cstdint>

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>
#include <png.h>
#include <tiffio.h>
#include <webp/decode.h>

namespace stoker::image {

namespace {

#define STOKER_STRINGIFY2(x) #x
#define STOKER_STRINGIFY(x) STOKER_STRINGIFY2(x)

std::string make_decoder_versions() {
  std::string v = "jpeg-turbo " STOKER_STRINGIFY(LIBJPEG_TURBO_VERSION) " (jpeg " STOKER_STRINGIFY(JPEG_LIB_VERSION) ")";
  v += std::string(", png ") + png_get_libpng_ver(nullptr);
  const int webp = WebPGetDecoderVersion();  // 0x010204 is 1.2.4
  v += ", webp " + std::to_string((webp >> 16) & 0xff) + "." + std::to_string((webp >> 8) & 0xff) + "." +
       std::to_string(webp & 0xff);
  // TIFFGetVersion(): "LIBTIFF, Version 4.5.0\nCopyright ...": its first line's last word.
  std::string tiff = TIFFGetVersion();
  tiff = tiff.substr(0, tiff.find('\n'));
  v += ", tiff " + tiff.substr(tiff.rfind(' ') + 1);
  return v;
}

}  // namespace

const std::string& decoder_versions() {
  static const std::string v = make_decoder_versions();
  return v;
}

}  // namespace stoker::image
