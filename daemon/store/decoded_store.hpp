// The decoded-pixel store (job key `decoded_store`): images reduced for the pipeline
// (PipelineSpec::store_max_side) kept on disk, so later epochs and other jobs with the same
// source and max_side skip the decode.
//
// One data file per (source identity, max_side): DIR/<source:016x>-<max_side>.pixels. It is an
// append-only log (byte layout in store_format.hpp): a file header, then entries of a 64-byte
// header, the sample's path and its packed RGB pixels. The index (sample path -> newest entry)
// is rebuilt in memory from the entries' headers when the file is opened and caught up when
// another process appended. An entry is served only when its header checksum, its path, and
// the checksum of its pixels all match, and the file it was made from still has the same size
// and modification time; otherwise the sample is decoded again and appended anew (the index
// then points to the new entry). A torn or damaged tail (a killed writer, a scribbled header)
// ends the log there: the next writer truncates it and those samples are decoded again.
//
// Reads are pread() copies, not a mapping: the page cache is still what serves them (the file
// is never opened O_DIRECT), and a store truncated by another process or by hand then gives a
// short read (counted, decoded again) rather than SIGBUS in the daemon.
//
// Budget: entries are admitted while the file stays within `bytes`, then no more (admit until
// full, then keep, as the sample cache does: epochs visit every sample once, so evicting would
// replace entries each just before their next use). An I/O error or a full disk on write turns
// writes off for the rest of the run (logged once, counted); reads and decoding go on.
//
// Threads and processes: one DecodedStore per data file in a daemon (open() shares it between
// jobs); any worker may get()/put() at once. Appends from several daemons are serialized by
// flock(LOCK_EX) on the data file; readers never lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/mutex.hpp"

namespace stoker::store {

// What an entry is made from: the sample's path (as the dataset names it) and the size and
// modification time of the file its bytes come from.
struct EntryKey {
  std::string_view path;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
};

struct StoreStats {
  std::uint64_t entries = 0;       // distinct samples indexed
  std::uint64_t bytes = 0;         // size of the data file
  std::uint64_t budget = 0;
  std::uint64_t rebuilt = 0;       // entries found broken (checksum, short read) and decoded again
  std::uint64_t errors = 0;        // I/O errors on the store (read or write)
  std::uint64_t refused_full = 0;  // entries not admitted: the budget was reached
  bool writes_off = false;         // after a write error (full disk): decoding only
};

// Reduced image as stored and as returned.
struct StoredImage {
  std::uint32_t width = 0, height = 0;
  int orientation = 1;
  const std::uint8_t* pixels = nullptr;  // width * height * 3; valid until the buffer changes
};

class DecodedStore {
 public:
  // The data file's name for a source identity and max_side.
  static std::string file_name(std::uint64_t source_id, std::uint32_t max_side);
  // The store of (dir, source_id, max_side), shared with every other job of this daemon that
  // opened the same one (its budget is the first opener's). Creates the folder and file.
  // Throws std::runtime_error naming the path when they cannot be created or opened.
  static std::shared_ptr<DecodedStore> open(const std::filesystem::path& dir, std::uint64_t source_id,
                                            std::uint32_t max_side, std::uint64_t budget);
  ~DecodedStore();
  DecodedStore(const DecodedStore&) = delete;
  DecodedStore& operator=(const DecodedStore&) = delete;

  enum class Lookup {
    kHit,      // `out` holds the entry's pixels (in `buffer`)
    kMissing,  // not stored, or stored from another version of the file
    kBroken,   // stored but damaged or unreadable: counted; decode and put() again
  };
  Lookup get(const EntryKey& key, std::vector<std::uint8_t>& buffer, StoredImage& out);
  // Whether an entry for exactly this file version is indexed (not read nor verified).
  bool contains(const EntryKey& key);
  // Whether any entry for `path` is indexed (of whatever file version): read-ahead's hint that
  // the sample's bytes will likely not be needed. No system call.
  bool has_path(std::string_view path);
  // Appends the entry if the budget has room and writes are on; never fails the caller.
  void put(const EntryKey& key, const StoredImage& image);

  StoreStats stats() const;
  const std::filesystem::path& file() const { return file_; }
  std::uint32_t max_side() const { return max_side_; }

 private:
  DecodedStore(std::filesystem::path file, int fd, std::uint32_t max_side, std::uint64_t budget);
  struct Entry {
    std::uint64_t offset = 0;  // of its header
    std::uint64_t size = 0;    // the source file's
    std::int64_t mtime_ns = 0;
    std::uint32_t record_bytes = 0;
  };
  // Indexes the entries from scanned_end_ up to the end of the file; returns the file size seen.
  std::uint64_t scan() STOKER_REQUIRES(mu_);
  // Logs `what` (the first time only) and counts an I/O error.
  void io_error(const char* what, int err);

  const std::filesystem::path file_;
  const int fd_;
  const std::uint32_t max_side_;
  const std::uint64_t budget_;
  mutable base::Mutex mu_;
  std::unordered_map<std::uint64_t, Entry> index_ STOKER_GUARDED_BY(mu_);  // by hash of the path
  std::uint64_t scanned_end_ STOKER_GUARDED_BY(mu_) = 0;                    // end of the last whole entry
  std::atomic<std::uint64_t> rebuilt_{0}, errors_{0}, refused_{0}, file_bytes_{0};
  std::atomic<bool> writes_off_{false}, logged_error_{false}, logged_full_{false};
};

}  // namespace stoker::store
