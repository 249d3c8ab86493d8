#include "image/exif.hpp"

#include <cstring>

namespace stoker::image {

int exif_orientation(const std::uint8_t* data, std::size_t size) {
  if (data == nullptr || size < 14 || std::memcmp(data, "Exif\0\0", 6) != 0) return 1;
  return exif_orientation_tiff(data + 6, size - 6);
}

int exif_orientation_tiff(const std::uint8_t* data, std::size_t size) {
  if (data != nullptr && size >= 14 && std::memcmp(data, "Exif\0\0", 6) == 0) {
    data += 6;
    size -= 6;
  }
  if (data == nullptr || size < 8) return 1;
  const std::uint8_t* tiff = data;
  const std::size_t n = size;
  bool little;
  if (tiff[0] == 'I' && tiff[1] == 'I') {
    little = true;
  } else if (tiff[0] == 'M' && tiff[1] == 'M') {
    little = false;
  } else {
    return 1;
  }
  auto u16 = [&](std::size_t off) -> std::uint32_t {
    return little ? (tiff[off] | (tiff[off + 1] << 8)) : ((tiff[off] << 8) | tiff[off + 1]);
  };
  auto u32 = [&](std::size_t off) -> std::uint32_t {
    return little ? (tiff[off] | (tiff[off + 1] << 8) | (tiff[off + 2] << 16) |
                     (static_cast<std::uint32_t>(tiff[off + 3]) << 24))
                  : ((static_cast<std::uint32_t>(tiff[off]) << 24) | (tiff[off + 1] << 16) |
                     (tiff[off + 2] << 8) | tiff[off + 3]);
  };
  if (u16(2) != 42) return 1;
  const std::uint32_t ifd = u32(4);
  if (ifd < 8 || ifd > n - 2) return 1;
  const std::uint32_t entries = u16(ifd);
  for (std::uint32_t i = 0; i < entries; ++i) {
    const std::size_t e = ifd + 2 + 12ull * i;
    if (e + 12 > n) return 1;
    if (u16(e) != 0x0112) continue;     // Orientation
    if (u16(e + 2) != 3) return 1;      // type SHORT
    const std::uint32_t v = u16(e + 8); // value stored in the first 2 bytes of the field
    return v >= 1 && v <= 8 ? static_cast<int>(v) : 1;
  }
  return 1;
}

}  // namespace stoker::image
