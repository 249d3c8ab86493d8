// A dataset is an immutable, ordered list of samples. Sample ids are indices in that order.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace stoker::source {

struct Sample {
  std::string path;     // absolute
  std::int64_t label;
};

struct Dataset {
  std::vector<std::string> classes;  // label -> class name
  std::vector<Sample> samples;       // id -> sample
};

class SourceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// torchvision ImageFolder semantics: classes are the sorted names of root's subfolders,
// labels their indices, samples every file with an image extension (case-insensitive .jpg
// .jpeg .png .ppm .bmp .pgm .tif .tiff .webp) below each class folder, recursively, in the
// order torchvision gives (folders sorted by path, files by name), classes in order.
// Symlinks are followed.
// Throws SourceError when root is missing, unreadable, or holds no images.
Dataset scan_image_folder(const std::filesystem::path& root);

}  // namespace stoker::source
