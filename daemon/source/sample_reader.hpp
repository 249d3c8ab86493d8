// Reads a sample's bytes wherever its dataset keeps them: a whole file, or a member of a tar
// shard read by offset through a small cache of open shard descriptors.
//
// Why cache shard descriptors: a member costs open + fstat + pread + close without it; on a
// network file system the open is a round trip per member. With it, a shard is opened once
// while its members are read, and an unshuffled job's shard gets POSIX_FADV_SEQUENTIAL so the
// kernel reads ahead in large requests along the shard.
//
// Invariants: at most `max_open_shards` descriptors are cached (a bounded LRU, sized from the
// descriptor limit); when an open fails for lack of descriptors or memory (a transient
// verdict) every cached descriptor is given back, so the cache never holds what the machine
// needs; a descriptor is closed only when no read uses it (shared ownership). Verdicts are
// file_reader's: transient, missing, or bytes. A dataset with `read_as` (a client-defined job
// of another user) reads only what that user could: every open is checked (read_access.hpp).
// A shard in object storage (Dataset::shard_source) is read by one ranged GET a member through
// its source's fetcher: a fault left after the fetcher's retries is transient, an object
// gone (404, or now shorter than indexed) or refused (403) is missing, as a file would be.
// Threads: read() may be called from any number of threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "source/dataset.hpp"
#include "source/file_reader.hpp"
#include "base/mutex.hpp"

namespace stoker::source {

class SampleReader {
 public:
  struct Options {
    bool sequential = false;  // members are read in shard order (an unshuffled job)
    // Most shard descriptors kept open; 0: open per member. Capped at an eighth of the soft
    // RLIMIT_NOFILE so the cache never crowds out the workers' and the sockets' descriptors.
    std::size_t max_open_shards = 64;
  };

  SampleReader(const Dataset& dataset, Options options);
  SampleReader(const SampleReader&) = delete;
  SampleReader& operator=(const SampleReader&) = delete;

  ReadResult read(std::uint32_t id, std::vector<std::uint8_t>& out);
  // Starts reading sample `id` without a thread waiting on it, when it is a tar member in
  // object storage whose source keeps no cache: `done` gets the verdict and the bytes on the
  // fetcher's thread (see Fetcher::get_range_async). False: nothing started, read() it.
  using ReadDone = std::function<void(ReadResult&&, std::vector<std::uint8_t>&&)>;
  bool start_read(std::uint32_t id, ReadDone& done);
  // Whether sample `id` is read from object storage (a URL), not a local file: a transient
  // failure of such a read means the store is away, which a job waits out (job_read.cpp).
  bool from_object_store(std::uint32_t id) const;

  std::size_t open_shards() const;
  std::size_t max_open_shards() const { return max_open_; }

 private:
  struct ShardFd;
  std::shared_ptr<ShardFd> shard_fd(std::uint32_t shard, ReadResult& failed);
  // open_for_read, or for a dataset read as a client's user (Dataset::read_as) open_checked:
  // a file that user may not read is missing.
  int open_for_read_as(const std::string& path, ReadResult& failed) const;

  ReadResult read_object(const Sample& s, std::vector<std::uint8_t>& out);
  ReadResult read_whole_object(std::uint32_t id, std::uint32_t source, std::vector<std::uint8_t>& out);
  // The object source sample `id`'s whole file is read through; kLocalShard: a file on disk.
  std::uint32_t whole_source(std::uint32_t id) const;

  const Dataset& dataset_;
  // Parsed once: the URL of each shard in object storage (nullopt for a local shard).
  std::vector<std::optional<objstore::ObjectUrl>> urls_;
  const bool sequential_;
  std::size_t max_open_;
  mutable base::Mutex mu_;
  // Shard numbers, most recently used first.
  std::list<std::uint32_t> lru_ STOKER_GUARDED_BY(mu_);
  struct Cached {
    std::shared_ptr<ShardFd> fd;
    std::list<std::uint32_t>::iterator at;
  };
  std::unordered_map<std::uint32_t, Cached> open_ STOKER_GUARDED_BY(mu_);
};

}  // namespace stoker::source
