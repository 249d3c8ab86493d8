// The queue between the jobs and the decode workers: one FIFO per job, shared fairly.
//
// Items are per sample (not per batch) so that all cores stay busy even with one consumer and
// a small batch. Within a job, items leave in the order they were pushed, so earlier batches
// finish first. Between jobs, pop() is stride scheduling (virtual time): each job has a
// virtual time that grows by 1/weight per item it is given, and the next item goes to the job
// with the least virtual time among those with queued items and a free worker under their cap.
// Busy jobs therefore get items in proportion to their weights; a job with nothing queued
// takes nothing, and its share goes to the others (work-conserving); no job with queued items
// waits for ever, since every other job's virtual time grows each time it is served.
//
// A job that was idle (nothing queued, nothing running) restarts at no less than the least
// virtual time of the busy jobs: an idle period banks no credit, so a job that wakes cannot
// take the whole pool until it has "caught up".
//
// Cost: O(jobs) per pop, push and done; jobs are few.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "base/mutex.hpp"

namespace stoker::sched {

class Task;  // sched/task.hpp: what a job is to the pool

struct WorkItem {
  Task* job;  // the job the item belongs to (named job: what every caller calls it)
  std::uint32_t ring;
  std::uint32_t slot;
  std::uint32_t position;    // index of the sample inside the batch
  std::uint32_t generation;  // the slot's generation when planned (an invariant check)
};

// How one job shares the pool (the job keys `weight` and `workers`).
struct JobShare {
  double weight = 1;             // > 0; busy jobs get items in proportion
  std::uint32_t max_workers = 0; // most items of the job running at once; 0: no cap
};

class WorkQueue {
 public:
  // Jobs not in `shares` (by index) get the default share: weight 1, no cap.
  WorkQueue() = default;
  explicit WorkQueue(std::vector<JobShare> shares);

  // Items of jobs, each queued behind the earlier items of its own job (item.job->index()).
  void push(std::vector<WorkItem>&& items);
  // The same for items of job `job` only, whatever their `job` pointer says (tests).
  void push(std::size_t job, std::vector<WorkItem>&& items);
  // Blocks until some job has an item it may run, or stop() was called (then returns false).
  // The caller must call done(job) once it has finished the item.
  bool pop(WorkItem& out, std::size_t& job);
  // The item of `job` that pop() handed out has finished: frees its place under the cap.
  void done(std::size_t job);
  // A job added while running (reload, a client-defined job) gets its share before its first push.
  void set_share(std::size_t job, JobShare share);
  // The job is being removed: its queued items are dropped and later pushes for it discarded
  // (under the queue's lock, so no item of it can be queued after this returns). Items already
  // handed out still finish; the job may be destroyed once in_flight(job) is 0.
  void close(std::size_t job);
  bool closed(std::size_t job) const;
  std::uint64_t closures() const { return closures_.load(std::memory_order_acquire); }  // close() calls so far
  void stop();

  // --- remote workers (daemon/remote/dispatcher.hpp) ---
  // Takes the front item of `job` for a remote worker, waiting at most `wait`; false when
  // there is none it may take (or the queue stopped, or the lane closed). Local workers come
  // first: while a local worker idles in pop() an item is left for it, unless the lane is
  // remote-only. The item does not count under the job's `workers` cap nor in in_flight():
  // the dispatcher that took it finishes or re-issues it, and is destroyed before the job.
  bool pop_remote(std::size_t job, WorkItem& out, std::chrono::milliseconds wait);
  // Items taken by pop_remote whose worker failed: queued again ahead of the job's other items,
  // in the order given (so the batches they belong to still finish first).
  void push_front(std::size_t job, std::vector<WorkItem>&& items);
  // remote: {local: false} while a worker is connected: local workers leave the job's items
  // to pop_remote. Off again (the local pool serves) when no worker is left.
  void set_remote_only(std::size_t job, bool remote_only);
  std::size_t queued(std::size_t job) const;  // items of `job` waiting

  std::size_t depth() const;             // items queued, all jobs
  std::size_t in_flight(std::size_t job) const;

 private:
  struct Lane {
    JobShare share;
    std::deque<WorkItem> items;
    std::uint32_t running = 0;  // popped and not yet done()
    double vtime = 0;           // virtual time: items served / weight, plus catch-up
    bool closed = false;        // job being removed: pushes discarded
    bool remote_only = false;   // set_remote_only: pop() skips the lane
  };
  Lane& lane(std::size_t job) STOKER_REQUIRES(mu_);         // grows lanes_ as needed
  bool runnable(const Lane& l) const STOKER_REQUIRES(mu_);
  Lane* next_lane() STOKER_REQUIRES(mu_);                   // the runnable lane of least vtime
  void wake(Lane& l, std::size_t job) STOKER_REQUIRES(mu_); // idle -> busy catch-up
  bool remote_may_take(const Lane& l) const STOKER_REQUIRES(mu_);

  mutable base::Mutex mu_;
  base::CondVar cv_;
  std::vector<Lane> lanes_ STOKER_GUARDED_BY(mu_);  // by job index
  std::size_t queued_ STOKER_GUARDED_BY(mu_) = 0;   // sum of lanes_[*].items.size()
  // The greatest virtual time an item was served at: where a job that wakes while every other
  // job is idle restarts (no lower, so idling banks nothing).
  double clock_ STOKER_GUARDED_BY(mu_) = 0;
  bool stopped_ STOKER_GUARDED_BY(mu_) = false;
  std::size_t idle_ STOKER_GUARDED_BY(mu_) = 0;  // local workers waiting in pop()
  base::CondVar remote_cv_;  // pop_remote's waiters: apart, so a push never wakes only them
  std::atomic<std::uint64_t> closures_{0};
};

}  // namespace stoker::sched
