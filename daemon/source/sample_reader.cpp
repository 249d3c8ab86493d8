#include "source/sample_reader.hpp"

#include <algorithm>
#include <cerrno>
#include <sys/stat.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

namespace stoker::source {

struct SampleReader::ShardFd {
  int fd;
  explicit ShardFd(int f) : fd(f) {}
  ~ShardFd() { ::close(fd); }
  ShardFd(const ShardFd&) = delete;
  ShardFd& operator=(const ShardFd&) = delete;
};

SampleReader::SampleReader(const Dataset& dataset, Options options)
    : dataset_(dataset), sequential_(options.sequential), max_open_(options.max_open_shards) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    max_open_ = std::min<std::size_t>(max_open_, static_cast<std::size_t>(lim.rlim_cur / 8));
  }
  if (dataset_.shards.empty()) max_open_ = 0;
  if (!dataset_.shard_source.empty()) {
    urls_.resize(dataset_.shards.size());
    for (std::size_t i = 0; i < dataset_.shards.size(); ++i) {
      if (dataset_.shard_source[i] == Dataset::kLocalShard) continue;
      std::string why;
      urls_[i] = objstore::parse_object_url(dataset_.shards[i], why);  // parsed when indexed: cannot fail
    }
  }
}

namespace {

// A fetch's verdict as a read's (file_reader.hpp's three kinds).
ReadResult fetch_verdict(objstore::FetchResult& got, std::vector<std::uint8_t>& out) {
  switch (got.error) {
    case objstore::FetchError::kNone:
      out = std::move(got.body);
      return {};
    case objstore::FetchError::kTransient:
      return ReadResult{ReadStatus::kTransient, EAGAIN, got.message};
    case objstore::FetchError::kNotFound:
      return ReadResult{ReadStatus::kMissing, ENOENT, got.message};
    case objstore::FetchError::kDenied:
      return ReadResult{ReadStatus::kMissing, EACCES, got.message};
    case objstore::FetchError::kOther:
      break;
  }
  // An answer we do not understand (400, a redirect): the object, as far as we can tell, is
  // not readable now; skipped this epoch and asked for again the next, never quarantined.
  return ReadResult{ReadStatus::kMissing, EIO, got.message};
}

}  // namespace

ReadResult SampleReader::read_object(const Sample& s, std::vector<std::uint8_t>& out) {
  objstore::Fetcher& f = *dataset_.object_sources[dataset_.shard_source[s.shard]].fetcher;
  objstore::FetchResult got = f.get_range(*urls_[s.shard], s.offset, s.size);
  return fetch_verdict(got, out);
}

bool SampleReader::start_read(std::uint32_t id, ReadDone& done) {
  const Sample& s = dataset_.samples[id];
  if (s.shard == Sample::kWholeFile || urls_.empty() || !urls_[s.shard]) return false;
  objstore::Fetcher& f = *dataset_.object_sources[dataset_.shard_source[s.shard]].fetcher;
  // A cached source would be read on this thread anyway (Fetcher::get_range_async): declined,
  // so read-ahead counts its reader as blocked in a read and wakes another for what waits.
  if (f.options().cache != nullptr) return false;
  f.get_range_async(*urls_[s.shard], s.offset, s.size, [done = std::move(done)](objstore::FetchResult&& got) {
    std::vector<std::uint8_t> bytes;
    ReadResult r = fetch_verdict(got, bytes);
    done(std::move(r), std::move(bytes));
  });
  return true;
}

std::uint32_t SampleReader::whole_source(std::uint32_t id) const {
  if (dataset_.parts.empty()) return dataset_.root_source;
  // A mixture: the part holding `id` (parts are in id order, each `size` ids from `offset`).
  const auto it = std::upper_bound(dataset_.parts.begin(), dataset_.parts.end(), id,
                                   [](std::uint32_t v, const DatasetPart& p) { return v < p.offset; });
  return it == dataset_.parts.begin() ? Dataset::kLocalShard : std::prev(it)->whole_source;
}

ReadResult SampleReader::read_whole_object(std::uint32_t id, std::uint32_t source, std::vector<std::uint8_t>& out) {
  objstore::Fetcher& f = *dataset_.object_sources[source].fetcher;
  const std::string url_text = dataset_.path(id);
  std::string why;
  const std::optional<objstore::ObjectUrl> url = objstore::parse_object_url(url_text, why);
  if (!url) return ReadResult{ReadStatus::kMissing, EINVAL, url_text + ": " + why};
  objstore::FetchResult got = f.get(*url);
  return fetch_verdict(got, out);
}

int SampleReader::open_for_read_as(const std::string& path, ReadResult& failed) const {
  if (!dataset_.read_as) return open_for_read(path, failed);
  const base::Result<int> fd = open_checked(path, *dataset_.read_as, /*directory=*/false);
  if (!fd) {
    // Missing, not transient: skipped this epoch and looked at again the next, as any file
    // its reader may not open (EACCES).
    failed = ReadResult{ReadStatus::kMissing, EACCES, "cannot open: " + fd.status().message()};
    return -1;
  }
  return *fd;
}

std::size_t SampleReader::open_shards() const {
  base::MutexLock lock(mu_);
  return open_.size();
}

std::shared_ptr<SampleReader::ShardFd> SampleReader::shard_fd(std::uint32_t shard, ReadResult& failed) {
  {
    base::MutexLock lock(mu_);
    if (auto it = open_.find(shard); it != open_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.at);
      return it->second.fd;
    }
  }
  // Opened outside the lock (an open can take a network round trip); two threads may open the
  // same shard at once, and the second simply keeps its own descriptor for its read.
  const int fd = open_for_read_as(dataset_.shards[shard], failed);
  if (fd < 0) {
    if (failed.status == ReadStatus::kTransient) {
      // Out of descriptors or memory: give back every cached descriptor (each closes once the
      // reads using it finish), then the caller retries as for any machine fault.
      base::MutexLock lock(mu_);
      open_.clear();
      lru_.clear();
    }
    return nullptr;
  }
  auto shared = std::make_shared<ShardFd>(fd);
  if (sequential_) (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  base::MutexLock lock(mu_);
  if (max_open_ == 0 || open_.count(shard) != 0) return shared;
  while (open_.size() >= max_open_) {
    open_.erase(lru_.back());
    lru_.pop_back();
  }
  lru_.push_front(shard);
  open_.emplace(shard, Cached{shared, lru_.begin()});
  return shared;
}

bool SampleReader::from_object_store(std::uint32_t id) const {
  const Sample& s = dataset_.samples[id];
  if (s.shard == Sample::kWholeFile) return whole_source(id) != Dataset::kLocalShard;
  return !urls_.empty() && urls_[s.shard].has_value();
}

ReadResult SampleReader::read(std::uint32_t id, std::vector<std::uint8_t>& out) {
  const Sample& s = dataset_.samples[id];
  if (s.shard == Sample::kWholeFile) {
    if (const std::uint32_t source = whole_source(id); source != Dataset::kLocalShard) {
      return read_whole_object(id, source, out);
    }
    if (!dataset_.read_as) return read_file(dataset_.path(id), out);
    ReadResult failed;
    const int fd = open_for_read_as(dataset_.path(id), failed);
    if (fd < 0) return failed;
    const ShardFd guard(fd);
    struct stat st {};
    if (::fstat(fd, &st) != 0) return read_range_at(fd, 0, 0, out);  // gives fstat's verdict
    return read_range_at(fd, 0, static_cast<std::uint64_t>(st.st_size), out);
  }
  if (!urls_.empty() && urls_[s.shard]) return read_object(s, out);
  ReadResult failed;
  const std::shared_ptr<ShardFd> fd = shard_fd(s.shard, failed);
  if (!fd) return failed;
  return read_range_at(fd->fd, s.offset, s.size, out);
}

}  // namespace stoker::source
