// What a reader of a download in progress sees: how many bytes of the object are in the sink
// descriptor so far, and whether the transfer ended. Indexing a tar shard in a bucket reads
// its headers as the body streams in (source/tar_shards.cpp), instead of waiting for the whole
// object: the walk ends about when the download does, and the pages it has walked past can be
// given back at once.
//
// Invariants: bytes [0, written()) of the sink hold the object's first bytes, as sent. A retry
// starts the object over (the fetcher truncates the sink), so `written` may go back to 0; the
// bytes it writes again are the same object's (a changed object is caught by its size, as
// before). Once finished, nothing is written any more.
//
// Threads: the fetcher's driver thread calls restarted/wrote and reads cancelled; the thread
// that ran the request calls finished; any one reader calls wait_for and cancel.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/mutex.hpp"

namespace stoker::objstore {

class SinkWatch {
 public:
  void restarted() { wrote(0); }
  void wrote(std::uint64_t total) {
    base::MutexLock lock(mu_);
    written_ = total;
    if (waiting_) cv_.notify_all();
  }
  void finished() {
    base::MutexLock lock(mu_);
    finished_ = true;
    cv_.notify_all();
  }

  // Waits until [0, end) is in the sink (true), or the transfer ended first (false: the object
  // is shorter than that, or the fetch failed; the request's result says which).
  bool wait_for(std::uint64_t end) {
    base::MutexLock lock(mu_);
    waiting_ = true;
    while (written_ < end && !finished_) cv_.wait(lock);
    waiting_ = false;
    return written_ >= end;
  }

  bool has_finished() {
    base::MutexLock lock(mu_);
    return finished_;
  }

  // The reader needs nothing more (it found the shard corrupt): the fetcher ends the transfer
  // at its next write instead of fetching the rest for nobody.
  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  base::Mutex mu_;
  base::CondVar cv_;
  std::uint64_t written_ STOKER_GUARDED_BY(mu_) = 0;
  bool finished_ STOKER_GUARDED_BY(mu_) = false;
  bool waiting_ STOKER_GUARDED_BY(mu_) = false;  // no notify per body chunk when nobody waits
  std::atomic<bool> cancelled_{false};
};

}  // namespace stoker::objstore
