// A dataset is an immutable, ordered list of samples. Sample ids are indices in that order.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "objstore/fetcher.hpp"
#include "source/read_access.hpp"

namespace stoker::source {

// Where a sample's bytes are: a whole file, or a tar member, the `size` bytes at `offset` of
// the shard file `Dataset::shards[shard]`. Its name (Dataset::name) is the file's path below
// Dataset::root, or the member's name; Dataset::path gives the whole path, which names the
// sample in logs and in the quarantine: ROOT/NAME, or "SHARD:MEMBER" for a tar member.
// 40 bytes a sample plus its name's bytes (no string object, no allocation per sample): a
// million-sample index takes ~70 MB, not the ~150 MB of a std::string path each.
struct Sample {
  static constexpr std::uint32_t kWholeFile = 0xffffffffu;
  std::int64_t label = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::uint64_t name_at = 0;       // its name is Dataset::names[name_at, name_at + name_size)
  std::uint32_t shard = kWholeFile;
  std::uint32_t name_size = 0;
};

// One source of a mixture (source/mixed_dataset.hpp): its ids are [offset, offset + size) of
// the combined dataset.
struct DatasetPart {
  std::string name;
  std::uint32_t offset = 0;
  std::uint32_t size = 0;
  std::size_t classes = 0;  // the classes this source had on its own
  // Its whole files' object source (an ImageFolder or file list in a bucket): an index into
  // Dataset::object_sources; 0xffffffff (Dataset::kLocalShard) for files on disk.
  std::uint32_t whole_source = 0xffffffffu;
};

// A source in object storage (issue #35): the fetcher its members are read through, shared
// by the dataset and whoever shows its counters (status `sources`, /metrics).
struct ObjectSource {
  std::string name;  // the first shard's URL, or the mixture entry's name
  std::shared_ptr<objstore::Fetcher> fetcher;
};

struct Dataset {
  static constexpr std::uint32_t kLocalShard = 0xffffffffu;
  std::vector<std::string> classes;  // label -> class name
  std::vector<DatasetPart> parts;    // a mixture's sources in id order; empty: one source
  std::vector<Sample> samples;       // id -> sample
  std::vector<std::string> shards;   // tar sources: absolute shard paths, in pattern order
  // Whole files: the folder their names are relative to, without a trailing '/' ("" when the
  // names are absolute paths).
  std::string root;
  std::string names;  // every sample's name, back to back
  // A client-defined job of another user: every file read for it (SampleReader) is checked
  // against that user's permissions (source/read_access.hpp). Null: stokerd's own reads.
  std::shared_ptr<const ReadAs> read_as;
  // Object storage: empty when every shard is a local file; else shard_source[i] is the
  // object_sources entry shards[i] (a URL) is read through, kLocalShard for a local shard.
  std::vector<ObjectSource> object_sources;
  std::vector<std::uint32_t> shard_source;
  // Whole files in object storage (an ImageFolder listed from a bucket): root is a URL and
  // every whole-file sample is fetched through object_sources[root_source]; kLocalShard: files.
  std::uint32_t root_source = kLocalShard;

  // Appends a sample named `name` (a path below root, or a member of shards[shard]).
  void add(std::string_view name, std::int64_t label, std::uint32_t shard = Sample::kWholeFile,
           std::uint64_t offset = 0, std::uint64_t size = 0) {
    samples.push_back(Sample{label, offset, size, names.size(), shard, static_cast<std::uint32_t>(name.size())});
    names.append(name);
  }
  std::string_view name(std::size_t id) const {
    const Sample& s = samples[id];
    return std::string_view(names).substr(s.name_at, s.name_size);
  }
  // The absolute path of a whole file; "SHARD:MEMBER" for a tar member.
  std::string path(std::size_t id) const {
    const Sample& s = samples[id];
    const std::string_view n = name(id);
    if (s.shard != Sample::kWholeFile) return shards[s.shard] + ":" + std::string(n);
    return root.empty() ? std::string(n) : root + "/" + std::string(n);
  }
};

// Shrinks a loaded dataset's arrays to their size and returns freed heap to the system (the
// sources call it last, so RSS after start-up is what the index really costs).
void settle(Dataset& d);

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
// `as`: every folder is listed only when that user could list it (read_access.hpp); a
// folder that user cannot list stops the scan with an error naming the folder, never what
// it holds.
Dataset scan_image_folder(const std::filesystem::path& root, const ReadAs* as = nullptr);

// ImageFolder semantics over object storage (issue #35): `root` an s3:// URL of a "folder"
// (a key prefix); classes are the sorted prefixes one level below it (ListObjectsV2 with
// delimiter '/', every page), samples every key with an image extension below each class, in
// ImageFolder's order (folders sorted by path, then names). Objects are not fetched here.
// Throws SourceError naming the URL for a failed listing (the fetcher's message: 403 names
// where the credentials came from), no class prefix, or no images.
Dataset scan_object_folder(const std::string& root, std::shared_ptr<objstore::Fetcher> fetcher,
                           const std::string& log_name);

// torchvision's IMG_EXTENSIONS, matched case-insensitively at the end of the name.
bool has_image_extension(std::string_view name);

// A text file list, one sample per line in the file's order: `path`, `path,label` or
// `path<TAB>label` (CSV/TSV); blank lines and lines starting with '#' are skipped; relative
// paths are relative to `root`. Labels are given on every line or on none: integers are used
// as they are (classes "0".."max"), names become classes (sorted, as ImageFolder sorts its
// folders); without labels the class is the file's parent folder name, as in ImageFolder.
// Files are not opened here (a million-line list indexes in about a second); one that is
// missing is skipped at read time like any missing file. Throws SourceError naming
// "FILE:LINE" for a malformed line, mixed labelled/unlabelled lines, or an empty list.
// `as`: the list is read only when that user could read it.
Dataset read_file_list(const std::filesystem::path& list, const std::filesystem::path& root,
                       const ReadAs* as = nullptr);

// A file list in object storage (issue #35): `list` an s3:// or https:// URL, fetched once;
// entries are keys relative to `root` (a URL; "" for the list's folder) or whole URLs, with
// the labels read_file_list takes. Every sample is then one GET through `fetcher`.
Dataset read_object_file_list(const std::string& list, const std::string& root,
                              std::shared_ptr<objstore::Fetcher> fetcher);

// WebDataset tar shards (tar_shards.cpp). `patterns`: absolute shard paths, each possibly
// with brace groups (`train-{000000..001023}.tar`, zero-padded as written; `{a,b}`), expanded
// in order. Every shard is indexed once (tar headers read directly, a few shards at a time);
// `index_cache` (may be empty: no cache) keeps the index keyed by each shard's path, size and
// mtime so a restart with unchanged shards reads no headers. A sample is the group of
// consecutive members sharing a key (the member name up to the first '.' of its basename):
// its image member (.jpg .jpeg .png .webp .bmp .tif .tiff .ppm .pgm) and its label (.cls, or
// a .txt holding a decimal integer). Throws SourceError naming the shard (and offset) for a
// missing, compressed, truncated or corrupt shard, or a sample without a label beside
// labelled ones. `log_name` prefixes the progress and summary lines ("job train").
// `as`: every shard is checked readable by that user before its index (cached or not) is used.
// Patterns may be s3:// or https:// URLs (issue #35), read through `fetcher` (required then):
// each object's size and Last-Modified come from a HEAD (what keys the index cache), an
// object not in the cache is fetched whole, once, and its headers walked in memory; its
// samples are then read by one ranged GET each (SampleReader). The dataset keeps `fetcher`.
Dataset read_tar_shards(const std::vector<std::string>& patterns, const std::filesystem::path& index_cache,
                        const std::string& log_name = "tar", const ReadAs* as = nullptr,
                        std::shared_ptr<objstore::Fetcher> fetcher = nullptr);

// Brace expansion of one shard pattern: `a-{00..11}.tar` gives a-00.tar .. a-11.tar (width as
// written when a bound has a leading zero), `{a,b}` gives each alternative; several groups
// expand left to right. Throws SourceError for an unbalanced brace, a descending or
// malformed range, or more than 10^7 names.
std::vector<std::string> expand_braces(const std::string& pattern);

}  // namespace stoker::source
