// Bytes of a decoded store's data file (see decoded_store.hpp), little-endian as the machine
// writes it (the store is a local cache, never moved between architectures):
//
//   FileHeader (32 bytes)                  magic "STKPIXv1", max_side, zero padding
//   { EntryHeader (64 bytes) | path (path_bytes) | pixels (pixel_bytes) }*
//
// An entry is whole when its header's checksum (over the header up to header_sum, then the
// path) matches, pixel_bytes == width * height * 3, and it ends within the file; its pixels
// are good when their checksum matches pixel_sum. The version is in the magic: any change to
// these structs makes a new magic, and a file of another magic is renamed aside, not read.
#pragma once

#include <cstddef>
#include <cstdint>

namespace stoker::store {

inline constexpr char kFileMagic[8] = {'S', 'T', 'K', 'P', 'I', 'X', 'v', '1'};
inline constexpr std::uint32_t kEntryMagic = 0x45505453;  // "STPE"
inline constexpr std::uint32_t kMaxPathBytes = 4096;
inline constexpr std::uint32_t kMaxSide = 16384;

struct FileHeader {
  char magic[8];
  std::uint32_t max_side;
  std::uint32_t reserved0;
  std::uint64_t reserved[2];
};
static_assert(sizeof(FileHeader) == 32);

struct EntryHeader {
  std::uint32_t magic;        // kEntryMagic
  std::uint32_t path_bytes;   // <= kMaxPathBytes
  std::uint32_t width;        // <= kMaxSide
  std::uint32_t height;       // <= kMaxSide
  std::uint32_t orientation;  // EXIF 1..8 of the source file
  std::uint32_t reserved;     // 0
  std::uint64_t file_size;    // of the source file the pixels were decoded from
  std::int64_t mtime_ns;      // its modification time
  std::uint64_t pixel_bytes;  // width * height * 3
  std::uint64_t pixel_sum;    // checksum64 of the pixels
  std::uint64_t header_sum;   // checksum64 of the bytes above, seeded with checksum64 of the path
};
static_assert(sizeof(EntryHeader) == 64);
static_assert(offsetof(EntryHeader, file_size) == 24);
static_assert(offsetof(EntryHeader, header_sum) == 56);

}  // namespace stoker::store
