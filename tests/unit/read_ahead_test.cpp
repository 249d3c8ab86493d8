// Unit tier: read-ahead (source/read_ahead.hpp) with a read function the test controls: bytes
// handed over unchanged and in order, the byte budget held, reads not started withdrawn for the
// worker to do itself, verdicts passed through, dropped reads freed.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "source/read_ahead.hpp"

using stoker::source::ReadAhead;
using stoker::source::ReadResult;
using stoker::source::ReadStatus;

namespace {

// A gate the test opens: reads wait on it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  int waiting = 0;
  void pass() {
    std::unique_lock lock(mu);
    ++waiting;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
  }
  void wait_for_waiting(int n) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return waiting >= n; });
  }
  void release() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
};

std::string text(const std::vector<std::uint8_t>& v) { return std::string(v.begin(), v.end()); }

// Until `n` reads have begun (a read that has begun is waited for by take, never withdrawn).
void until_started(const std::atomic<int>& calls, int n) {
  while (calls.load() < n) std::this_thread::yield();
}

}  // namespace

TEST_CASE("read-ahead hands each item its sample's bytes and keeps within the byte budget",
          "[server][read_ahead]") {
  std::atomic<int> in_flight{0}, calls{0};
  std::atomic<std::uint64_t> worst{0};
  ReadAhead* self = nullptr;
  std::mutex self_mu;
  ReadAhead ra(
      "t", /*budget_bytes=*/10, /*requests=*/4,
      [&](std::uint32_t id, std::vector<std::uint8_t>& out) {
        ++in_flight;
        ++calls;
        {
          std::lock_guard lock(self_mu);
          // Bytes held ahead plus reads in flight (4 bytes each): a read starts only under 10,
          // so the total can pass it by the last read started, never more. Held bytes first,
          // then the count: a read finishing between the two is counted once at most.
          const std::uint64_t held = self->stats().held_bytes;
          const std::uint64_t total = held + 4 * static_cast<std::uint64_t>(in_flight.load());
          std::uint64_t w = worst.load();
          while (total > w && !worst.compare_exchange_weak(w, total)) {
          }
        }
        out.assign(4, static_cast<std::uint8_t>('a' + id));
        --in_flight;
        return ReadResult{};
      },
      [](std::uint32_t) -> std::uint64_t { return 4; });
  {
    std::lock_guard lock(self_mu);
    self = &ra;
  }
  for (std::uint32_t k = 0; k < 8; ++k) ra.want(100 + k, 1, k);
  // Before anything is taken, the readers fill the budget and stop: three 4-byte reads
  // (a read starts while held + in flight < 10).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ra.stats().held_bytes < 12 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  CHECK(ra.stats().held_bytes == 12);
  CHECK(calls.load() == 3);
  std::vector<std::uint8_t> out;
  for (std::uint32_t k = 0; k < 8; ++k) {
    until_started(calls, static_cast<int>(k) + 1);  // in order, as the budget frees
    auto r = ra.take(100 + k, 1, out);
    REQUIRE(r.has_value());
    CHECK(r->ok());
    CHECK(text(out) == std::string(4, static_cast<char>('a' + k)));
  }
  const auto st = ra.stats();
  CHECK(st.ready + st.waited == 8);
  CHECK(st.withdrawn == 0);
  CHECK(st.held_bytes == 0);
  CHECK(worst.load() <= 12);
  CHECK(calls.load() == 8);
}

TEST_CASE("read-ahead: an item not started is withdrawn for the worker, one being read is waited for",
          "[server][read_ahead]") {
  Gate gate;
  std::atomic<int> calls{0};
  ReadAhead ra(
      "t", 1 << 20, /*requests=*/1,
      [&](std::uint32_t id, std::vector<std::uint8_t>& out) {
        ++calls;
        if (id == 0) gate.pass();
        out.assign(1, static_cast<std::uint8_t>('0' + id));
        return ReadResult{};
      },
      nullptr);
  ra.want(1, 7, 0);
  ra.want(2, 7, 1);
  ra.want(3, 7, 2);
  gate.wait_for_waiting(1);  // the one reader is inside item 1's read
  std::vector<std::uint8_t> out;
  CHECK_FALSE(ra.take(3, 7, out).has_value());  // queued: the worker reads it itself
  CHECK_FALSE(ra.take(1, 8, out).has_value());  // another generation's item: not this read
  gate.release();
  auto first = ra.take(1, 7, out);
  REQUIRE(first.has_value());
  CHECK(text(out) == "0");
  until_started(calls, 2);
  auto second = ra.take(2, 7, out);
  REQUIRE(second.has_value());
  CHECK(text(out) == "1");
  const auto st = ra.stats();
  CHECK(st.withdrawn == 1);  // item 3 (a take of another generation withdraws nothing)
  CHECK(calls.load() == 2);  // item 3 was withdrawn before any reader reached it
}

TEST_CASE("read-ahead passes transient and missing verdicts through and frees dropped reads",
          "[server][read_ahead]") {
  Gate gate;
  std::atomic<int> calls{0};
  ReadAhead ra(
      "t", 1 << 20, 2,
      [&](std::uint32_t id, std::vector<std::uint8_t>& out) {
        ++calls;
        ReadResult r;
        if (id == 1) {
          r.status = ReadStatus::kTransient;
          r.error = 24;
          r.reason = "cannot open: Too many open files";
        } else if (id == 2) {
          r.status = ReadStatus::kMissing;
          r.reason = "cannot open: No such file or directory";
        } else {
          gate.pass();
          out.assign(1000, 'x');
        }
        return r;
      },
      nullptr);
  ra.want(10, 1, 1);
  ra.want(11, 1, 2);
  std::vector<std::uint8_t> out;
  until_started(calls, 2);
  auto t = ra.take(10, 1, out);
  auto m = ra.take(11, 1, out);
  REQUIRE(t.has_value());
  REQUIRE(m.has_value());
  CHECK(t->status == ReadStatus::kTransient);
  CHECK(t->reason == "cannot open: Too many open files");
  CHECK(m->status == ReadStatus::kMissing);
  ra.want(12, 1, 3);
  gate.wait_for_waiting(1);
  ra.drop(12, 1);  // dropped while being read: freed when the read ends
  gate.release();
  ra.want(13, 1, 4);
  until_started(calls, 4);
  auto last = ra.take(13, 1, out);
  REQUIRE(last.has_value());
  CHECK(out.size() == 1000);
  CHECK(ra.stats().held_bytes == 0);
}

TEST_CASE("read-ahead over a slow link: reads in flight grow while the worker waits, up to max_requests, and "
          "the items come out as fast as latency allows",
          "[server][read_ahead]") {
  // Every read takes 20 ms (a round trip to object storage), the worker's own read of an item
  // not started too. The worker takes 400 items in order as fast as they come. With the 4
  // reads in flight it starts with, at most 4 items per 20 ms: 2 s or more. Growing toward 64
  // the limit must reach well past 4 and the whole run take a fraction of that.
  std::atomic<int> in_flight{0}, most{0};
  ReadAhead ra(
      "t", 1 << 30, /*requests=*/4,
      [&](std::uint32_t id, std::vector<std::uint8_t>& out) {
        const int now = ++in_flight;
        int m = most.load();
        while (now > m && !most.compare_exchange_weak(m, now)) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        out.assign(1, static_cast<std::uint8_t>(id & 0xff));
        --in_flight;
        return ReadResult{};
      },
      nullptr, /*max_requests=*/64);
  CHECK(ra.stats().in_flight_limit == 4);
  constexpr std::uint32_t kItems = 400;
  for (std::uint32_t k = 0; k < kItems; ++k) ra.want(k, 1, k);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::uint8_t> out;
  for (std::uint32_t k = 0; k < kItems; ++k) {
    auto r = ra.take(k, 1, out);
    if (!r) {  // withdrawn (not started): the worker reads it itself, a round trip
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    CHECK(out.at(0) == static_cast<std::uint8_t>(k & 0xff));
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto st = ra.stats();
  INFO("seconds " << s << ", limit " << st.in_flight_limit << ", most in flight " << most.load());
  CHECK(st.in_flight_limit > 16);
  CHECK(st.in_flight_limit <= 64);
  CHECK(most.load() > 16);
  CHECK(most.load() <= 64);
  CHECK(s < 1.0);  // fixed at 4 in flight: >= 2 s
}

TEST_CASE("read-ahead without max_requests keeps its reads in flight where they are", "[server][read_ahead]") {
  std::atomic<int> in_flight{0}, most{0};
  ReadAhead ra(
      "t", 1 << 30, /*requests=*/3,
      [&](std::uint32_t, std::vector<std::uint8_t>& out) {
        const int now = ++in_flight;
        int m = most.load();
        while (now > m && !most.compare_exchange_weak(m, now)) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        out.assign(1, 0);
        --in_flight;
        return ReadResult{};
      },
      nullptr);
  for (std::uint32_t k = 0; k < 60; ++k) ra.want(k, 1, k);
  std::vector<std::uint8_t> out;
  for (std::uint32_t k = 0; k < 60; ++k) (void)ra.take(k, 1, out);
  CHECK(ra.stats().in_flight_limit == 3);
  CHECK(most.load() <= 3);
}

namespace {

// What a fetcher does for read-ahead's started reads: each is answered `delay` after it was
// started, on this one thread, in start order.
class FakeLink {
 public:
  explicit FakeLink(std::chrono::milliseconds delay) : delay_(delay), thread_([this] { run(); }) {}
  ~FakeLink() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void start(std::uint32_t id, ReadAhead::ReadDone done) {
    std::lock_guard lock(mu_);
    queue_.push_back({std::chrono::steady_clock::now() + delay_, id, std::move(done)});
    const int now = static_cast<int>(queue_.size());
    most = std::max(most.load(), now);
    cv_.notify_all();
  }
  std::atomic<int> most{0};

 private:
  struct Read {
    std::chrono::steady_clock::time_point due;
    std::uint32_t id;
    ReadAhead::ReadDone done;
  };
  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      // Stopping answers what is left at once, as a stopping fetcher does.
      if (queue_.empty()) {
        if (stop_) return;
        cv_.wait(lock);
        continue;
      }
      if (!stop_ && std::chrono::steady_clock::now() < queue_.front().due) {
        cv_.wait_until(lock, queue_.front().due);
        continue;
      }
      Read r = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      std::vector<std::uint8_t> bytes(1, static_cast<std::uint8_t>(r.id & 0xff));
      // Every 7th sample is gone from the store: its verdict is passed through.
      r.done(r.id % 7 == 3 ? ReadResult{ReadStatus::kMissing, ENOENT, "gone"} : ReadResult{}, std::move(bytes));
      lock.lock();
    }
  }
  const std::chrono::milliseconds delay_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Read> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

TEST_CASE("read-ahead's started reads: many in flight without a thread each, in order, verdicts passed, "
          "declined ones read by a reader, and the end waits for the last answer",
          "[server][read_ahead]") {
  // 400 items over a 20 ms link, as the slow-link case above, but read by starting them: the
  // link's one thread answers. Every 5th sample declines to start (a local member of a
  // mixture) and is read by a reader thread. Answers come at once on this thread for every
  // 11th (a cache hit).
  FakeLink link(std::chrono::milliseconds(20));
  std::atomic<int> blocking_reads{0};
  auto ra = std::make_unique<ReadAhead>(
      "t", 1 << 30, /*requests=*/4,
      [&](std::uint32_t id, std::vector<std::uint8_t>& out) {
        ++blocking_reads;
        CHECK(id % 5 == 0);
        out.assign(1, static_cast<std::uint8_t>(id & 0xff));
        return ReadResult{};
      },
      nullptr, /*max_requests=*/64, [&](std::uint32_t id, ReadAhead::ReadDone& done) {
        if (id % 5 == 0) return false;
        if (id % 11 == 0) {
          done(ReadResult{}, std::vector<std::uint8_t>(1, static_cast<std::uint8_t>(id & 0xff)));
          return true;
        }
        link.start(id, std::move(done));
        return true;
      });
  constexpr std::uint32_t kItems = 400;
  for (std::uint32_t k = 0; k < kItems; ++k) ra->want(k, 1, k);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::uint8_t> out;
  int withdrawn = 0;
  for (std::uint32_t k = 0; k < kItems; ++k) {
    auto r = ra->take(k, 1, out);
    if (!r) {
      ++withdrawn;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    CAPTURE(k);
    if (k % 7 == 3 && k % 5 != 0 && k % 11 != 0) {
      CHECK(r->status == ReadStatus::kMissing);
      CHECK(r->reason == "gone");
    } else {
      CHECK(r->ok());
      CHECK(out.at(0) == static_cast<std::uint8_t>(k & 0xff));
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO("seconds " << s << ", most on the link " << link.most.load() << ", withdrawn " << withdrawn);
  CHECK(link.most.load() > 16);  // many in flight at once though the readers never blocked on them
  CHECK(link.most.load() <= 64);
  CHECK(blocking_reads.load() <= static_cast<int>(kItems / 5));
  CHECK(s < 1.0);
  // Reads started and not yet answered when it ends: the destructor waits for their answers
  // (which call back into it), and nothing is left held.
  for (std::uint32_t k = kItems; k < kItems + 40; ++k) ra->want(k, 1, k);
  while (link.most.load() == 0) std::this_thread::yield();
  ra.reset();
}
