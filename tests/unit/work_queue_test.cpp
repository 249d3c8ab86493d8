// Unit tier: the WorkQueue's fair sharing between jobs (stride scheduling by weight, no credit
// banked while idle, per-job worker caps) and its FIFO order and stop() within that.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "proc_status.hpp"
#include "sched/work_queue.hpp"

using stoker::sched::JobShare;
using stoker::sched::WorkItem;
using stoker::sched::WorkQueue;

namespace {

// `n` items numbered from `first` (in `position`), with no Job behind them.
std::vector<WorkItem> items(std::uint32_t n, std::uint32_t first = 0) {
  std::vector<WorkItem> out;
  for (std::uint32_t i = 0; i < n; ++i) out.push_back(WorkItem{nullptr, 0, 0, first + i, 0});
  return out;
}

// Pops `n` items (each done() at once) and counts them by job.
std::vector<int> pop_counts(WorkQueue& q, int n, std::size_t jobs) {
  std::vector<int> counts(jobs, 0);
  WorkItem it{};
  std::size_t job = 0;
  for (int i = 0; i < n; ++i) {
    REQUIRE(q.pop(it, job));
    REQUIRE(job < jobs);
    ++counts[job];
    q.done(job);
  }
  return counts;
}

}  // namespace

TEST_CASE("work queue: two busy jobs of weight 3 and 1 get items 3:1", "[work_queue]") {
  WorkQueue q({JobShare{3, 0}, JobShare{1, 0}});
  q.push(0, items(1000));
  q.push(1, items(1000));
  const auto counts = pop_counts(q, 400, 2);
  CHECK(counts[0] >= 298);
  CHECK(counts[0] <= 302);
  CHECK(counts[0] + counts[1] == 400);
  // Every window is fair, not just the total: the light job is never left out for long.
  WorkItem it{};
  std::size_t job = 0;
  int since_light = 0, longest = 0;
  for (int i = 0; i < 100; ++i) {
    REQUIRE(q.pop(it, job));
    q.done(job);
    since_light = job == 1 ? 0 : since_light + 1;
    longest = std::max(longest, since_light);
  }
  CHECK(longest <= 3);
}

TEST_CASE("work queue: items of one job leave in the order they were pushed", "[work_queue]") {
  WorkQueue q({JobShare{2, 0}, JobShare{1, 0}});
  q.push(0, items(50, 0));
  q.push(1, items(50, 0));
  q.push(0, items(50, 50));
  std::vector<std::uint32_t> next(2, 0);
  WorkItem it{};
  std::size_t job = 0;
  for (int i = 0; i < 150; ++i) {
    REQUIRE(q.pop(it, job));
    CHECK(it.position == next[job]);
    ++next[job];
    q.done(job);
  }
  CHECK(next[0] == 100);
  CHECK(next[1] == 50);
  CHECK(q.depth() == 0);
}

TEST_CASE("work queue: a job that was idle gets no banked credit when it wakes", "[work_queue]") {
  WorkQueue q({JobShare{1, 0}, JobShare{1, 0}});
  q.push(0, items(1000));
  CHECK(pop_counts(q, 300, 2)[0] == 300);  // job 1 idle: job 0 has the whole pool
  q.push(1, items(1000));
  // Equal weights from here on: job 1 gets half, not the 300 items job 0 had alone.
  const auto counts = pop_counts(q, 100, 2);
  CHECK(counts[1] >= 49);
  CHECK(counts[1] <= 51);

  // The same when every job went idle in between: the waking job restarts at the clock.
  WorkQueue r({JobShare{1, 0}, JobShare{1, 0}});
  r.push(0, items(300));
  CHECK(pop_counts(r, 300, 2)[0] == 300);
  r.push(1, items(100));  // job 1 wakes first, while job 0 is idle
  r.push(0, items(100));
  const auto again = pop_counts(r, 100, 2);
  CHECK(again[0] >= 49);
  CHECK(again[0] <= 51);
}

TEST_CASE("work queue: an idle job's share goes to the busy ones", "[work_queue]") {
  WorkQueue q({JobShare{1, 0}, JobShare{5, 0}, JobShare{1, 0}});
  q.push(0, items(100));
  q.push(2, items(100));
  const auto counts = pop_counts(q, 100, 3);  // job 1 has nothing queued: 1:1 between 0 and 2
  CHECK(counts[1] == 0);
  CHECK(counts[0] == 50);
  CHECK(counts[2] == 50);
}

TEST_CASE("work queue: a capped job never has more than its cap in flight", "[work_queue]") {
  constexpr int kThreads = 4;
  constexpr std::uint32_t kCap = 2;
  constexpr std::uint32_t kPerJob = 2000;
  WorkQueue q({JobShare{1, kCap}, JobShare{1, 0}});
  q.push(0, items(kPerJob));
  q.push(1, items(kPerJob));
  std::atomic<int> running_capped{0}, most_capped{0}, finished{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&] {
      WorkItem it{};
      std::size_t job = 0;
      while (q.pop(it, job)) {
        if (job == 0) {
          const int now = running_capped.fetch_add(1) + 1;
          int most = most_capped.load();
          while (now > most && !most_capped.compare_exchange_weak(most, now)) {
          }
        }
        for (int i = 0; i < 20; ++i) std::this_thread::yield();  // some work, so runs overlap
        if (job == 0) running_capped.fetch_sub(1);
        q.done(job);
        finished.fetch_add(1);
      }
    });
  }
  // Once job 1 is drained the cap alone decides: two workers run job 0 while the other two
  // wait, and each done() of job 0 must let one of them take the next item.
  while (finished.load() < static_cast<int>(2 * kPerJob)) std::this_thread::yield();
  CHECK(q.depth() == 0);
  q.stop();
  for (auto& w : workers) w.join();
  CHECK(most_capped.load() <= static_cast<int>(kCap));
  CHECK(most_capped.load() >= 1);
  CHECK(q.in_flight(0) == 0);
  CHECK(q.in_flight(1) == 0);
}

TEST_CASE("work queue: at its cap a job's next item waits for done()", "[work_queue]") {
  WorkQueue q({JobShare{1, 1}});
  q.push(0, items(2));
  WorkItem it{};
  std::size_t job = 9;
  REQUIRE(q.pop(it, job));
  CHECK(job == 0);
  CHECK(q.in_flight(0) == 1);
  std::atomic<bool> second{false};
  std::thread waiter([&] {
    WorkItem w{};
    std::size_t j = 0;
    if (q.pop(w, j)) second = true;
  });
  // The waiter cannot have the item while the first one runs (checked after it had every
  // chance to take it).
  for (int i = 0; i < 1000 && !second.load(); ++i) std::this_thread::yield();
  CHECK_FALSE(second.load());
  CHECK(q.depth() == 1);
  q.done(0);
  waiter.join();  // done() woke it, and it took the item
  CHECK(second.load());
  CHECK(q.depth() == 0);
}

TEST_CASE("work queue: stop wakes every waiting worker", "[work_queue]") {
  // Some wait on an empty queue, some on a job whose cap is taken.
  WorkQueue q({JobShare{1, 1}});
  q.push(0, items(3));
  WorkItem it{};
  std::size_t job = 0;
  REQUIRE(q.pop(it, job));
  std::atomic<int> refused{0};
  std::vector<std::thread> waiters;
  for (int t = 0; t < 4; ++t) {
    waiters.emplace_back([&] {
      WorkItem w{};
      std::size_t j = 0;
      if (!q.pop(w, j)) refused.fetch_add(1);
    });
  }
  q.stop();
  for (auto& w : waiters) w.join();
  CHECK(refused.load() == 4);
  CHECK_FALSE(q.pop(it, job));  // after stop, pop never blocks
}

TEST_CASE("work queue: jobs it was not told about share with weight 1 and no cap", "[work_queue]") {
  WorkQueue q;
  q.push(1, items(10));
  q.push(0, items(10));
  const auto counts = pop_counts(q, 10, 2);
  CHECK(counts[0] == 5);
  CHECK(counts[1] == 5);
}

// --- remote workers (daemon/remote/dispatcher.hpp takes items with pop_remote) ---

TEST_CASE("work queue: pop_remote leaves an item to an idle local worker and takes it once none idles",
          "[work_queue][remote]") {
  WorkQueue q;
  std::atomic<int> local_got{-1};
  std::thread local([&] {
    WorkItem it{};
    std::size_t job = 0;
    if (q.pop(it, job)) local_got = static_cast<int>(it.position);
  });
  // Let the local worker reach pop() and wait there (idle).
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  WorkItem it{};
  CHECK_FALSE(q.pop_remote(0, it, std::chrono::milliseconds(20)));  // nothing queued
  q.push(0, items(1, 7));
  local.join();
  CHECK(local_got == 7);  // the idle local worker got it, not the remote waiter
  // No local worker idles now: the remote side takes the next items, in order.
  q.push(0, items(2, 8));
  REQUIRE(q.pop_remote(0, it, std::chrono::milliseconds(100)));
  CHECK(it.position == 8);
  CHECK(q.in_flight(0) == 1);  // only the local worker's item (never done()); remote items are not counted
  REQUIRE(q.pop_remote(0, it, std::chrono::milliseconds(100)));
  CHECK(it.position == 9);
  CHECK(q.queued(0) == 0);
}

TEST_CASE("work queue: a remote-only lane is skipped by pop() and served by pop_remote", "[work_queue][remote]") {
  WorkQueue q;
  q.set_remote_only(0, true);
  q.push(0, items(2));
  q.push(1, items(1, 50));
  WorkItem it{};
  std::size_t job = 9;
  REQUIRE(q.pop(it, job));
  CHECK(job == 1);  // job 0's items wait for its remote workers
  q.done(1);
  REQUIRE(q.pop_remote(0, it, std::chrono::milliseconds(10)));
  CHECK(it.position == 0);
  // Its workers gone: local workers serve it again.
  q.set_remote_only(0, false);
  REQUIRE(q.pop(it, job));
  CHECK(job == 0);
  CHECK(it.position == 1);
}

namespace {

// One of this process's threads' /proc status fields (its state letter first for "State").
std::string task_field(pid_t tid, const std::string& key) {
  return stoker::test::proc_status_field("/proc/self/task/" + std::to_string(tid) + "/status", key);
}

}  // namespace

TEST_CASE("work queue: items pushed onto a remote-only lane do not wake idle local workers", "[work_queue][remote]") {
  // Each batch of a `remote: {local: false}` job used to wake every idle local worker, which
  // found nothing it may take and slept again: two context switches a batch on the GPU node
  // (issue #36). Counted here by the waiting thread's voluntary switches.
  WorkQueue q;
  q.set_remote_only(0, true);
  std::atomic<pid_t> tid{0};
  WorkItem got{};
  std::size_t job = 9;
  bool popped = false;
  std::thread local([&] {
    tid = ::gettid();
    popped = q.pop(got, job);
  });
  const auto asleep = [&] { return tid != 0 && task_field(tid, "State").rfind('S', 0) == 0; };
  for (int i = 0; i < 2000 && !asleep(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(asleep());
  const long before = std::stol(task_field(tid, "voluntary_ctxt_switches"));
  for (std::uint32_t i = 0; i < 40; ++i) {
    q.push(0, items(2, 2 * i));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // room for a woken thread to run
  }
  const long woken = std::stol(task_field(tid, "voluntary_ctxt_switches")) - before;
  CHECK(woken <= 2);
  CHECK(q.queued(0) == 80);
  // Its workers gone: set_remote_only(false) wakes the local worker, which takes the first.
  q.set_remote_only(0, false);
  local.join();
  CHECK(popped);
  CHECK(job == 0);
  CHECK(got.position == 0);
}

TEST_CASE("work queue: push_front re-issues items ahead of the job's others, in the order given", "[work_queue][remote]") {
  WorkQueue q;
  q.push(0, items(2, 10));
  q.push_front(0, items(2, 3));
  WorkItem it{};
  std::size_t job = 0;
  std::vector<std::uint32_t> order;
  for (int i = 0; i < 4; ++i) {
    REQUIRE(q.pop(it, job));
    order.push_back(it.position);
    q.done(job);
  }
  CHECK(order == std::vector<std::uint32_t>{3, 4, 10, 11});
  // A closed lane (the job is being removed) takes nothing back and gives nothing out.
  q.close(0);
  q.push_front(0, items(1));
  CHECK(q.queued(0) == 0);
  CHECK_FALSE(q.pop_remote(0, it, std::chrono::milliseconds(10)));
}

TEST_CASE("work queue: pop_remote takes a capped job's items while its local workers are at the cap",
          "[work_queue][remote]") {
  WorkQueue q({JobShare{1, 1}});
  q.push(0, items(3));
  WorkItem it{};
  std::size_t job = 0;
  REQUIRE(q.pop(it, job));  // the one local worker the cap allows
  std::atomic<bool> second{false};
  std::thread idle([&] {  // a second local worker, idle: the cap keeps it off job 0
    WorkItem x{};
    std::size_t j = 0;
    second = q.pop(x, j);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE(q.pop_remote(0, it, std::chrono::milliseconds(100)));
  CHECK(it.position == 1);
  q.stop();
  idle.join();
  CHECK_FALSE(second);
}
