// File bytes fetched ahead of decode (ARCHITECTURE.md, "reader"), so that decode threads do
// not wait on storage while the memory budget allows.
//
// The job announces each work item's sample when it plans the item (want), in the order the
// workers will take them; `requests` reader threads read them in that order, each one read at
// a time, so up to `requests` reads are in flight. A worker then takes the bytes of its item
// (take): done ones at once, one being read after waiting for it, one not started yet (the
// readers are behind, or the budget is full) is withdrawn and the worker reads it itself, so a
// worker never waits for a read it could do sooner.
//
// Why threads and not io_uring: a read of a ~110 KB file costs the reader thread ~20-40 us of
// CPU (open, fstat, pread, close; measured in docs/PERFORMANCE.md) against ~2 ms to decode it,
// so the submission cost io_uring would save is ~1% of a core; blocking threads need no kernel
// support that containers may refuse and keep the transient/missing verdicts of file_reader.
//
// Budget: a read starts only while the bytes read ahead and not yet taken, plus the expected
// size of the reads in flight (a tar member's indexed size; for whole files the mean size read
// so far), are under `budget_bytes`; one read may always proceed, so a file larger than the
// budget is still read. Verdicts (transient, missing) are handed over as they are: the job
// retries a transient one itself, exactly as when it reads the file.
//
// Reads in flight over a link with latency (object storage, issue #35): a read there takes a
// round trip (20-100 ms) instead of ~50 us, so the `requests` a local disk needs cannot keep
// the workers fed. With `max_requests` above `requests`, the number of reads in flight starts
// at `requests` and grows by half whenever a worker had to wait for its bytes (its read was
// still running, or not started: the readers are behind), at most every kGrowEvery, up to
// `max_requests`: it settles where rate x latency of reads are in flight, what the job's rate
// needs at the latency the link has. It never shrinks (the byte budget bounds what idle
// readers could hold).
//
// Reads that need no thread (start, issue #35): a tar member in object storage is one ranged
// GET that the fetcher's own thread drives. A reader thread starts it and goes on to the next
// item at once, and the fetcher's thread hands the bytes over when they came; so up to
// `max_requests` GETs are in flight with one reader thread awake, instead of a thread blocked
// on each (whose wake-ups cost ~10% of stokerd's CPU when it is CPU-bound, PERFORMANCE.md).
//
// Exactness: read-ahead changes who reads a sample and when, never which sample a position
// gets, so batches and resume are the same with or without it.
// Threads: want/take/drop from any thread (want is called under a ring's lock: it never
// blocks on a read); lock order: ring mutex, then this one's.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "source/file_reader.hpp"
#include "base/mutex.hpp"

namespace stoker::source {

struct ReadAheadStats {
  std::uint64_t ready = 0;      // taken already read
  std::uint64_t waited = 0;     // taken while being read (the worker waited for it)
  std::uint64_t withdrawn = 0;  // not started when taken: read by the worker
  std::uint64_t held_bytes = 0; // read ahead, not yet taken
  std::uint32_t in_flight_limit = 0;  // reads allowed in flight now (grows toward max_requests)
};

class ReadAhead {
 public:
  // read(id, out): the sample's bytes or verdict (the job's source::SampleReader).
  using ReadFn = std::function<source::ReadResult(std::uint32_t id, std::vector<std::uint8_t>& out)>;
  // size_hint(id): the bytes a read of `id` will hold when known (tar members), else 0.
  using SizeFn = std::function<std::uint64_t(std::uint32_t id)>;

  // start(id, done): starts reading `id` without blocking and returns true, calling `done`
  // once with the verdict and bytes (on another thread, or before returning); false when `id`
  // cannot be read that way (then read() is called). SampleReader::start_read.
  using ReadDone = std::function<void(source::ReadResult&&, std::vector<std::uint8_t>&&)>;
  using StartFn = std::function<bool(std::uint32_t id, ReadDone& done)>;

  // `max_requests` (0: the same as `requests`): the most reads in flight the limit may grow to.
  ReadAhead(std::string name, std::uint64_t budget_bytes, std::uint32_t requests, ReadFn read, SizeFn size_hint,
            std::uint32_t max_requests = 0, StartFn start = nullptr);
  ~ReadAhead();  // stops the readers (after their reads in flight, started ones too) and frees what they held
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // Item `key` (unique among items not yet taken or dropped) will need sample `id`.
  void want(std::uint64_t key, std::uint32_t generation, std::uint32_t id);
  // The read of item `key`: its result with the bytes swapped into `out`, after waiting if it
  // is being read; nullopt when it was never announced or not started (read it yourself).
  std::optional<source::ReadResult> take(std::uint64_t key, std::uint32_t generation, std::vector<std::uint8_t>& out);
  // Item `key` will not be read (cached, quarantined, the job stopped): frees its bytes.
  void drop(std::uint64_t key, std::uint32_t generation);

  ReadAheadStats stats() const;

 private:
  enum class State : std::uint8_t { kQueued, kReading, kDone };
  struct Entry {
    std::uint32_t generation = 0;
    std::uint32_t id = 0;
    State state = State::kQueued;
    bool dropped = false;      // dropped while being read: freed when the read ends
    source::ReadResult result;
    std::vector<std::uint8_t> bytes;
  };
  struct Pending {
    std::uint64_t key;
    std::uint32_t generation;
  };

  void run();
  bool may_start() const STOKER_REQUIRES(mu_);
  // Wakes one reader when there is a read to start and no reader is awake to see it: a
  // burst of items (a batch planned at once) wakes one reader, not one each.
  void wake_reader() STOKER_REQUIRES(mu_);
  // A read of `key` ended (a reader's, or a started one's callback): hands its bytes over.
  void finish(std::uint64_t key, std::uint64_t reserved, source::ReadResult&& r, std::vector<std::uint8_t>& bytes)
      STOKER_REQUIRES(mu_);

  const std::string name_;
  const std::uint64_t budget_;
  const ReadFn read_;
  const SizeFn size_hint_;
  const StartFn start_;

  mutable base::Mutex mu_;
  base::CondVar work_cv_;  // readers: an item was announced, or budget freed
  base::CondVar done_cv_;  // workers: a read finished
  std::unordered_map<std::uint64_t, Entry> entries_ STOKER_GUARDED_BY(mu_);
  // Announced, in order (may hold withdrawn ones).
  std::deque<Pending> pending_ STOKER_GUARDED_BY(mu_);
  std::uint64_t held_ STOKER_GUARDED_BY(mu_) = 0;      // bytes of done, untaken reads
  std::uint64_t reserved_ STOKER_GUARDED_BY(mu_) = 0;  // expected bytes of reads in flight
  // For the mean file size.
  std::uint64_t read_bytes_ STOKER_GUARDED_BY(mu_) = 0, read_count_ STOKER_GUARDED_BY(mu_) = 0;
  ReadAheadStats stats_ STOKER_GUARDED_BY(mu_);
  bool stop_ STOKER_GUARDED_BY(mu_) = false;
  // Reads allowed in flight (<= threads_.size()), and those running.
  std::uint32_t limit_ STOKER_GUARDED_BY(mu_) = 0;
  std::uint32_t running_ STOKER_GUARDED_BY(mu_) = 0;
  // Readers awake and going to look at pending_ before they sleep (not blocked in a read).
  std::uint32_t seeking_ STOKER_GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point last_grow_ STOKER_GUARDED_BY(mu_){};
  // A worker waited for its bytes: more reads in flight (at most every kGrowEvery).
  void grow() STOKER_REQUIRES(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace stoker::source
