// EXIF orientation from a JPEG APP1 segment or a WebP EXIF chunk. The bytes are untrusted: every offset is
// bounds-checked, and anything malformed means "no orientation" (1), never a crash.
#pragma once

#include <cstddef>
#include <cstdint>

namespace stoker::image {

// Returns 1..8 (1 = upright or unknown) from an APP1 payload starting with "Exif\0\0".
int exif_orientation(const std::uint8_t* data, std::size_t size);

// The same from EXIF data that starts at its TIFF header ("II*\0" / "MM\0*"), as a WebP EXIF
// chunk holds it; a leading "Exif\0\0" (some writers keep it) is accepted too.
int exif_orientation_tiff(const std::uint8_t* data, std::size_t size);

}  // namespace stoker::image
