// How a job reads a sample's bytes: a fault of the machine is not a bad file.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <sys/resource.h>
#include <thread>

#include "log/log.hpp"
#include "job/job.hpp"
#include "source/file_reader.hpp"

namespace stoker::job {
namespace {

// Backoff between attempts: 1 ms doubling to 1 s; the worker gives up on the sample for this
// epoch after kRetryBudget of transient failures (the machine did not recover: descriptors
// or memory still exhausted, the NFS server still away) rather than stall the job forever.
constexpr auto kFirstDelay = std::chrono::milliseconds(1);
constexpr auto kMaxDelay = std::chrono::milliseconds(1000);
constexpr auto kRetryBudget = std::chrono::seconds(30);
// Most reads in flight for a job reading object storage: ~1,600 samples/s at an 80 ms round
// trip; the fetcher keeps as many connections (fetcher.cpp).
constexpr std::uint32_t kObjectReadsInFlight = 128;

}  // namespace

void Job::start_reading() {
  source::SampleReader::Options o;
  // Members are then read in shard order. A windowed shuffle (window_shards) is shuffled
  // within its window, so it is not sequential either: cfg_.shuffle is true for it.
  o.sequential = !cfg_.shuffle;
  reader_ = std::make_unique<source::SampleReader>(dataset_, o);
  if (cfg_.read_ahead_requests == 0 || cfg_.read_ahead_bytes == 0) return;
  // Each read in flight holds a descriptor: at most an eighth of the limit, so read-ahead can
  // never take the descriptors the daemon's sockets and the workers need (a low LimitNOFILE).
  std::uint32_t requests = cfg_.read_ahead_requests;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    const auto cap = static_cast<std::uint32_t>(std::clamp<rlim_t>(lim.rlim_cur / 8, 1, UINT32_MAX));
    if (requests > cap) {
      stoker::log::warn(
          "job {}: read_ahead.requests {} lowered to {} (an eighth of the descriptor limit {}: each "
          "read in flight holds one; raise LimitNOFILE for more)",
          cfg_.name, requests, cap, lim.rlim_cur);
      requests = cap;
    }
  }
  // Samples in object storage: each read is a round trip, so the reads in flight grow from
  // `requests` while workers wait for bytes, up to kObjectReadsInFlight (read_ahead.hpp). A
  // ranged GET holds no descriptor of its own (the fetcher's connections are its own), so the
  // descriptor cap above does not bound the growth.
  const std::uint32_t most = dataset_.object_sources.empty() ? requests : std::max(requests, kObjectReadsInFlight);
  read_ahead_ = std::make_unique<source::ReadAhead>(
      cfg_.name, cfg_.read_ahead_bytes, requests,
      [this](std::uint32_t id, std::vector<std::uint8_t>& out) { return reader_->read(id, out); },
      [this](std::uint32_t id) { return dataset_.samples[id].size; }, most,
      [this](std::uint32_t id, source::ReadAhead::ReadDone& done) { return reader_->start_read(id, done); });
}

std::uint64_t Job::read_key(const WorkItem& item) const {
  // Unique among items not yet run: a slot is planned again only once all its items ran.
  return (static_cast<std::uint64_t>(item.ring) * cfg_.prefetch + item.slot) * cfg_.batch_size + item.position;
}

void Job::want_read(const WorkItem& item, std::uint32_t id) {
  if (!read_ahead_ || quarantined_[id].load() != 0) return;
  // Likely a store hit, which reads no file bytes: not fetched ahead (if the file changed since,
  // the worker reads it itself).
  if (store_ && store_->has_path(dataset_.path(id))) return;
  read_ahead_->want(read_key(item), item.generation, id);
}

void Job::drop_read(const WorkItem& item) {
  if (read_ahead_) read_ahead_->drop(read_key(item), item.generation);
}

bool Job::read_sample(const WorkItem& item, std::uint32_t id, std::uint64_t epoch, std::vector<std::uint8_t>& buffer,
                      image::SampleResult& result) {
  // Every return counts the time this worker waited for the bytes (status read_wait_s).
  struct WaitClock {
    std::atomic<std::uint64_t>& total;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    ~WaitClock() {
      total += static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
    }
  } clock{read_wait_ns_};
  const std::string path = dataset_.path(id);  // for the log lines (one string a read)
  // A whole file, or a tar member: the same verdicts, so the same retries below.
  auto read = [&] { return reader_->read(id, buffer); };
  std::optional<source::ReadResult> ahead;
  if (read_ahead_) ahead = read_ahead_->take(read_key(item), item.generation, buffer);
  source::ReadResult r = ahead ? std::move(*ahead) : read();
  if (r.status == source::ReadStatus::kTransient) {
    // One warning per burst (the first worker to enter it), one line when it ends.
    if (transient_burst_.fetch_add(1) == 0) {
      stoker::log::warn("job {}: transient read failure ({}) on {}; retrying with backoff, not blaming the file",
                        cfg_.name, r.reason, path);
    }
    // A sample in object storage whose reads keep failing transiently (each already retried
    // by the fetcher) means the store is away: the job waits for it, however long, with
    // paused_reason() saying why, rather than skip samples it would lose for the epoch. A
    // local file's fault is the machine's (descriptors, memory, a mount): given up after
    // kRetryBudget so one stuck disk cannot stall the job forever.
    // (Once stokerd is stopping, a failed read is what its stop made: no wait, no log of one.)
    const bool wait_for_store = reader_->from_object_store(id) && !stop_waiting_.load();
    if (wait_for_store) note_store_wait(+1, r.reason);
    const auto give_up = std::chrono::steady_clock::now() + kRetryBudget;
    auto delay = std::chrono::duration_cast<std::chrono::milliseconds>(kFirstDelay);
    std::uint64_t failures = 0;
    while (r.status == source::ReadStatus::kTransient && !failed_.load() && !draining_.load() &&
           !stop_waiting_.load() && (wait_for_store || std::chrono::steady_clock::now() < give_up)) {
      ++failures;
      std::this_thread::sleep_for(delay);
      delay = std::min(delay * 2, std::chrono::duration_cast<std::chrono::milliseconds>(kMaxDelay));
      r = read();
      if (wait_for_store && r.status == source::ReadStatus::kTransient) note_store_wait(0, r.reason);
    }
    if (wait_for_store) note_store_wait(-1, {});
    {
      base::MutexLock lock(stats_mu_);
      stats_.transient_read_errors += failures;
    }
    if (transient_burst_.fetch_sub(1) == 1 && r.ok()) {
      stoker::log::info("job {}: reads recovered", cfg_.name);
    }
    if (r.status == source::ReadStatus::kTransient) {
      stoker::log::warn("job {}: {}: still failing ({}) after {}; skipped this epoch, not quarantined", cfg_.name, path,
                        r.reason, wait_for_store ? "the job stopped waiting" : "30 s of retries");
    }
  }
  if (r.ok()) {
    bytes_read_.fetch_add(buffer.size(), std::memory_order_relaxed);
    return true;
  }
  // A missing file is named once per job run; each epoch's count is one line (epoch_done).
  // Before, every epoch named every one again: 8,192 lines a second from one client's job
  // over a folder its user may not read (issue #34, D3).
  if (r.status == source::ReadStatus::kMissing && missing_named_[id].exchange(1) == 0) {
    stoker::log::warn(
        "job {}: {}: {}; skipped this epoch, tried again next epoch (named once; each epoch counts "
        "such files in one line)",
        cfg_.name, path, r.reason);
  }
  {
    base::MutexLock lock(stats_mu_);
    if (r.status == source::ReadStatus::kMissing) missing_by_epoch_[epoch].files++;
    stats_.errors[static_cast<int>(image::SampleErrorKind::kIo)]++;
    stats_.missing += r.status == source::ReadStatus::kMissing ? 1 : 0;
  }
  result.error = image::SampleErrorKind::kIo;
  result.reason = r.reason;
  return false;
}

void Job::note_store_wait(int change, const std::string& reason) {
  base::MutexLock lock(stats_mu_);
  if (change > 0 && store_waiters_++ == 0) {
    store_wait_since_ = std::chrono::steady_clock::now();
    stoker::log::warn("job {}: the object store is not answering ({}); the job waits for it (no sample is skipped)",
                      cfg_.name, reason);
  }
  if (change < 0 && --store_waiters_ == 0) {
    store_wait_reason_.clear();
    if (stop_waiting_.load()) return;  // not the store's return: stokerd is stopping
    const auto waited = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() -
                                                                        store_wait_since_);
    stoker::log::info("job {}: the object store answers again after {} s; the job goes on", cfg_.name, waited.count());
    return;
  }
  if (!reason.empty()) store_wait_reason_ = reason;
}

void Job::stop_waiting() {
  stop_waiting_.store(true);
  for (const source::ObjectSource& os : dataset_.object_sources) os.fetcher->give_up_retries();
}

std::string Job::paused_reason() const {
  base::MutexLock lock(stats_mu_);
  if (store_waiters_ == 0) return {};
  const auto waited =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - store_wait_since_);
  return "waiting " + std::to_string(waited.count()) + " s for the object store: " + store_wait_reason_;
}

void Job::epoch_done(std::uint64_t epoch) {
  base::MutexLock lock(stats_mu_);
  MissingInEpoch& m = missing_by_epoch_[epoch];
  if (++m.rings_done < rings_.size()) return;
  if (m.files > 0) {
    stoker::log::warn(
        "job {}: epoch {}: {} read(s) of missing or unreadable files skipped (each file named once above)", cfg_.name,
        epoch, m.files);
  }
  // This epoch and any before it that a ring abandoned (a resume past it) are done with.
  missing_by_epoch_.erase(missing_by_epoch_.begin(), missing_by_epoch_.upper_bound(epoch));
}

}  // namespace stoker::job
