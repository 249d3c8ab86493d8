// WebDataset tar shards, the parts below read_tar_shards (dataset.hpp): the header walker that
// indexes one shard, and the index cache (tar_index.cpp) that spares a restart the walk.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "source/mapped_allocator.hpp"

namespace stoker::objstore {
class SinkWatch;
}

namespace stoker::source::tar {

// One sample of a shard: its image member's bytes are [offset, offset + size) of the file; its
// name ("n01440764/img_1.jpg") is ShardIndex::member(entry).
struct Entry {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::int64_t label = -1;  // -1: the sample has no .cls (or numeric .txt) member
  std::uint64_t member_at = 0;  // the name is ShardIndex::names[member_at, member_at + member_size)
  std::uint32_t member_size = 0;
};

// Members (or groups) skipped while indexing, by reason; never fatal, each counted and the
// first one of each kind named so the start log can say what and where.
enum SkipKind : std::size_t { kDuplicateKey, kNoImage, kUnsafeName, kNotRegular, kSkipKinds };
inline constexpr std::array<const char*, kSkipKinds> kSkipWhat = {
    "duplicate key", "no image member", "name escaping the shard ('..' or absolute)",
    "not a regular file (link, device, fifo)"};

struct ShardIndex {
  std::uint64_t file_size = 0;  // of the shard when it was indexed
  std::int64_t mtime_ns = 0;    // likewise: with the size, what makes a cached index valid
  // In member order. Both buffers are mapped memory: the indexing threads fill them, and a
  // thread's malloc arena would keep them resident after they are freed.
  std::vector<Entry, MappedAllocator<Entry>> entries;
  // The entries' member names back to back: one growing buffer a shard, not a string a member.
  std::basic_string<char, std::char_traits<char>, MappedAllocator<char>> names;
  std::array<std::uint64_t, kSkipKinds> skipped{};
  std::array<std::string, kSkipKinds> first_skipped;  // member (or key) of the first of each kind

  void add(std::string_view member, std::uint64_t offset, std::uint64_t size, std::int64_t label) {
    entries.push_back(Entry{offset, size, label, names.size(), static_cast<std::uint32_t>(member.size())});
    names.append(member);
  }
  std::string_view member(const Entry& e) const { return std::string_view(names).substr(e.member_at, e.member_size); }
};

// Walks the 512-byte headers of `path` (ustar with prefix, GNU long names 'L', pax 'x' path
// and size records; 'g' global records and 'K' long link names skipped) and groups members
// into samples. Reads headers, .cls/.txt labels and nothing else. Throws SourceError naming
// the shard (and the offset, for a header) when the file cannot be read, is compressed, or
// has a truncated or corrupt header or member.
// `fd` >= 0: the shard is read through that descriptor (one already checked for a client's
// user), which stays the caller's; `path` then only names it in messages.
// `arriving`: the shard is still being fetched into `fd` (an object in a bucket): its size is
// `size` (HEAD's), and each read first waits until `watch` says its bytes are in; the pages
// walked past are given back as the walk goes (fd must be a memfd or tmpfs file), so memory
// holds about what the download is ahead of the walk, not the shard. Throws the reader's
// SourceError "ended early" when the transfer ends first: the caller then reports the
// transfer's own error.
struct Arriving {
  std::uint64_t size = 0;
  objstore::SinkWatch* watch = nullptr;
};
ShardIndex index_shard(const std::string& path, int fd = -1, const Arriving* arriving = nullptr);

// A member name that would escape the shard's folder ('..', absolute) or holds a newline.
bool unsafe_name(std::string_view name);
// Extensions (lower case) that make a member a sample's image.
bool image_extension(std::string_view ext);

// A sidecar index beside a shard in a bucket ("train-000001.tar" -> "train-000001.idx", as
// DALI's wds2idx names it): the URL to look for.
std::string sidecar_url(const std::string& shard_url);
// The shard's index from a sidecar's text: Stoker's own format (what `stokerd --write-tar-index`
// writes: one shard record, its size that of the shard) or DALI's "v1.2" (ext offset size name
// per member, a sample per line) when no sample has a .cls/.txt label member (a DALI index
// gives offsets, not a label's contents: such shards are indexed by reading them). nullopt and
// `why` when the text cannot be used; every range is checked to lie inside `shard_size`.
std::optional<ShardIndex> parse_sidecar(std::string_view text, std::uint64_t shard_size, std::string& why);

// The index cache, one file per job: a ShardIndex per shard path. load gives an empty map
// for a missing, unreadable or malformed file (the shards are then indexed again);
// save writes a temporary file and renames it, so a reader never sees half a cache.
std::map<std::string, ShardIndex> load_index_cache(const std::filesystem::path& file);
// The same format from a stream (a sidecar fetched beside a shard), and written to a string.
std::map<std::string, ShardIndex> parse_index(std::istream& in);
std::string format_index(const std::vector<std::string>& shards, const std::vector<const ShardIndex*>& indexes);
// `text` as the file `file`: written to a temporary created O_EXCL|O_NOFOLLOW beside it, then
// renamed over it. Returns an error message, or "" when written.
std::string write_new_file(const std::filesystem::path& file, const std::string& text);
// Returns an error message, or "" when written.
std::string save_index_cache(const std::filesystem::path& file, const std::vector<std::string>& shards,
                             const std::vector<const ShardIndex*>& indexes);

}  // namespace stoker::source::tar
