#include "source/read_ahead.hpp"

#include <algorithm>
#include <cerrno>
#include <new>

#include "log/log.hpp"

namespace stoker::source {
namespace {

constexpr std::uint64_t kFirstGuess = 128 << 10;  // expected file size before any was read
// Growth at most this often: a read started by the last growth has had time to help.
constexpr auto kGrowEvery = std::chrono::milliseconds(20);

}  // namespace

ReadAhead::ReadAhead(std::string name, std::uint64_t budget_bytes, std::uint32_t requests, ReadFn read,
                     SizeFn size_hint, std::uint32_t max_requests, StartFn start)
    : name_(std::move(name)),
      budget_(budget_bytes),
      read_(std::move(read)),
      size_hint_(std::move(size_hint)),
      start_(std::move(start)) {
  const std::uint32_t threads = std::max(requests, max_requests);
  {
    base::MutexLock lock(mu_);
    limit_ = requests;
  }
  for (std::uint32_t i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

void ReadAhead::grow() {
  const auto now = std::chrono::steady_clock::now();
  const auto most = static_cast<std::uint32_t>(threads_.size());
  if (limit_ >= most || now - last_grow_ < kGrowEvery) return;
  last_grow_ = now;
  const std::uint32_t before = limit_;
  limit_ = std::min(most, limit_ + std::max<std::uint32_t>(1, limit_ / 2));
  stoker::log::debug("{}: read-ahead behind: reads in flight {} -> {}", name_, before, limit_);
  work_cv_.notify_all();
}

ReadAhead::~ReadAhead() {
  {
    base::MutexLock lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
  // Started reads call back into this object: wait for the last (a stopping fetcher answers
  // what it still holds at once).
  base::MutexLock lock(mu_);
  while (running_ > 0) done_cv_.wait(lock);
}

void ReadAhead::wake_reader() {
  if (seeking_ == 0 && may_start()) work_cv_.notify_one();
}

bool ReadAhead::may_start() const {
  return !pending_.empty() && running_ < limit_ && (held_ + reserved_ < budget_ || held_ + reserved_ == 0);
}

void ReadAhead::want(std::uint64_t key, std::uint32_t generation, std::uint32_t id) {
  {
    base::MutexLock lock(mu_);
    Entry& e = entries_[key];
    // An entry left under this key belongs to an item of an older generation that was never
    // taken (cannot happen while the job takes or drops every item; kept safe regardless).
    if (e.state == State::kDone) held_ -= e.bytes.size();
    if (e.state == State::kReading) {
      e.dropped = true;  // its reader frees it; this item reads for itself
      return;
    }
    e = Entry{};
    e.generation = generation;
    e.id = id;
    pending_.push_back({key, generation});
    wake_reader();
  }
}

std::optional<source::ReadResult> ReadAhead::take(std::uint64_t key, std::uint32_t generation,
                                                  std::vector<std::uint8_t>& out) {
  base::MutexLock lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.generation != generation || it->second.dropped) return std::nullopt;
  if (it->second.state == State::kQueued) {
    entries_.erase(it);  // its place in pending_ is skipped when a reader reaches it
    stats_.withdrawn++;
    // Not started: the readers are behind, unless the budget held them (more would not help).
    if (held_ + reserved_ < budget_) grow();
    return std::nullopt;
  }
  if (it->second.state == State::kReading) {
    stats_.waited++;
    grow();
    // Rehashing while unlocked may move the entry: look it up again after every wake.
    for (;;) {
      done_cv_.wait(lock);
      it = entries_.find(key);
      if (it == entries_.end()) return std::nullopt;
      if (it->second.state == State::kDone) break;
    }
  } else {
    stats_.ready++;
  }
  Entry& e = it->second;
  held_ -= e.bytes.size();
  out.swap(e.bytes);
  source::ReadResult r = std::move(e.result);
  entries_.erase(it);
  wake_reader();  // budget freed
  return r;
}

void ReadAhead::drop(std::uint64_t key, std::uint32_t generation) {
  {
    base::MutexLock lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.generation != generation) return;
    if (it->second.state == State::kReading) {
      it->second.dropped = true;
      return;
    }
    if (it->second.state == State::kDone) held_ -= it->second.bytes.size();
    entries_.erase(it);
    wake_reader();
  }
}

ReadAheadStats ReadAhead::stats() const {
  base::MutexLock lock(mu_);
  ReadAheadStats s = stats_;
  s.held_bytes = held_;
  s.in_flight_limit = limit_;
  return s;
}

void ReadAhead::run() {
  std::vector<std::uint8_t> buffer;
  base::MutexLock lock(mu_);
  ++seeking_;
  for (;;) {
    while (!stop_ && !may_start()) {
      --seeking_;
      work_cv_.wait(lock);
      ++seeking_;
    }
    if (stop_) return;
    const Pending p = pending_.front();
    pending_.pop_front();
    auto it = entries_.find(p.key);
    if (it == entries_.end() || it->second.generation != p.generation || it->second.state != State::kQueued) {
      continue;  // withdrawn or dropped before a reader reached it
    }
    Entry& e = it->second;
    const std::uint64_t hint = size_hint_ ? size_hint_(e.id) : 0;
    e.state = State::kReading;
    // Budget held while reading: the member's size, else the mean file size read so far.
    const std::uint64_t reserved = hint > 0 ? hint : read_count_ > 0 ? read_bytes_ / read_count_ : kFirstGuess;
    reserved_ += reserved;
    ++running_;
    const std::uint32_t id = e.id;
    // Blocked in the read from here: another reader takes what is waiting.
    if (!start_) {
      --seeking_;
      wake_reader();
    }
    lock.unlock();

    if (start_) {
      ReadDone done = [this, key = p.key, reserved](source::ReadResult&& r, std::vector<std::uint8_t>&& bytes) {
        base::MutexLock done_lock(mu_);
        finish(key, reserved, std::move(r), bytes);
      };
      bool started = false;
      try {
        started = start_(id, done);
      } catch (const std::bad_alloc&) {  // not started: read below, as any other
      }
      lock.lock();
      if (started) continue;
      --seeking_;  // declined: blocked in the read from here, as above
      wake_reader();
      lock.unlock();
    }
    source::ReadResult r;
    try {
      r = read_(id, buffer);
    } catch (const std::bad_alloc&) {  // a file too big for the memory left: the machine's fault
      r.status = source::ReadStatus::kTransient;
      r.error = ENOMEM;
      r.reason = "out of memory for the file's bytes";
      buffer = {};
    }
    lock.lock();
    ++seeking_;
    finish(p.key, reserved, std::move(r), buffer);
  }
}

void ReadAhead::finish(std::uint64_t key, std::uint64_t reserved, source::ReadResult&& r,
                       std::vector<std::uint8_t>& bytes) {
  reserved_ -= reserved;
  --running_;
  // Entries may rehash while unlocked; an entry being read is never erased by another thread
  // (take waits for it, drop and want mark it dropped), so the key is still ours.
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    wake_reader();  // a place under the limit is free
    if (running_ == 0) done_cv_.notify_all();  // the destructor may wait for the last read
    return;
  }
  Entry& done = it->second;
  if (r.ok()) {
    read_bytes_ += bytes.size();
    read_count_++;
  }
  if (done.dropped) {
    entries_.erase(it);
    wake_reader();
    if (running_ == 0) done_cv_.notify_all();
    return;
  }
  done.state = State::kDone;
  done.result = std::move(r);
  done.bytes.swap(bytes);  // `bytes` takes the entry's empty vector (a reader's next buffer)
  held_ += done.bytes.size();
  wake_reader();  // a place under the limit is free
  done_cv_.notify_all();
}

}  // namespace stoker::source
