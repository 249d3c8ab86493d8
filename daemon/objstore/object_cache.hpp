// A bounded cache of fetched object bytes on local disk (a source's `cache: {path, bytes}`),
// so an epoch after the first fetches nothing when the dataset fits: one file per cached read,
// evicted least recently used first when the bytes would pass the bound.
//
// Trust (docs/SECURITY.md): the folder must be stokerd's user's and writable by no one else,
// else it is refused naming the folder, its owner and mode; it is created 0700 when missing.
// Files are created O_CREAT | O_EXCL | O_NOFOLLOW mode 0600 under a temporary name, then
// renamed in place; a file is used only when fstat on its open descriptor says it is a
// regular file of ours, mode 0600 or stricter, with one link, and its header holds the key
// asked for (a name collision or a foreign file is a miss, never wrong bytes).
// Invariant: the files the cache counts hold at most `capacity` bytes together.
// Threads: get and put may be called from any thread at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/mutex.hpp"
#include "base/status.hpp"

namespace stoker::objstore {

class ObjectCache {
 public:
  // Opens (creating if missing) the folder; an error names the folder, its owner and mode.
  static base::Result<std::shared_ptr<ObjectCache>> open(const std::filesystem::path& dir, std::uint64_t capacity);
  ~ObjectCache();
  ObjectCache(const ObjectCache&) = delete;
  ObjectCache& operator=(const ObjectCache&) = delete;

  // The bytes kept under `key`, or false (a miss).
  bool get(const std::string& key, std::vector<std::uint8_t>& out);
  // Keeps `data` under `key`, evicting the least recently used files to make room; data
  // larger than the capacity is not kept. Failures (a full disk) only make it a miss later.
  void put(const std::string& key, const std::vector<std::uint8_t>& data);

  std::uint64_t bytes() const;
  std::size_t files() const;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  ObjectCache(std::filesystem::path dir, int dir_fd, std::uint64_t capacity);
  void load_existing();
  void forget(const std::string& name) STOKER_REQUIRES(mu_);

  const std::filesystem::path dir_;
  const int dir_fd_;
  const std::uint64_t capacity_;
  mutable base::Mutex mu_;
  std::list<std::string> lru_ STOKER_GUARDED_BY(mu_);  // file names, most recently used first
  struct Entry {
    std::list<std::string>::iterator at;
    std::uint64_t size;
  };
  std::unordered_map<std::string, Entry> entries_ STOKER_GUARDED_BY(mu_);
  std::uint64_t bytes_ STOKER_GUARDED_BY(mu_) = 0;
  std::uint64_t next_tmp_ STOKER_GUARDED_BY(mu_) = 0;
};

}  // namespace stoker::objstore
