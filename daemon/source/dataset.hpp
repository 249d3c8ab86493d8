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

// A text file list, one sample per line in the file's order: `path`, `path,label` or
// `path<TAB>label` (CSV/TSV); blank lines and lines starting with '#' are skipped; relative
// paths are relative to `root`. Labels are given on every line or on none: integers are used
// as they are (classes "0".."max"), names become classes (sorted, as ImageFolder sorts its
// folders); without labels the class is the file's parent folder name, as in ImageFolder.
// Files are not opened here (a million-line list indexes in about a second); one that is
// missing is skipped at read time like any missing file. Throws SourceError naming
// "FILE:LINE" for a malformed line, mixed labelled/unlabelled lines, or an empty list.
Dataset read_file_list(const std::filesystem::path& list, const std::filesystem::path& root);

}  // namespace stoker::source
