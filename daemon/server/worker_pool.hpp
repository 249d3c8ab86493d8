// The decode/augment workers: N threads draining one FIFO of per-sample work items.
// Per-sample items (not per-batch) keep all cores busy even with one consumer and a small
// batch; FIFO order makes earlier batches finish first.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace stoker::server {

class Job;

struct WorkItem {
  Job* job;
  std::uint32_t ring;
  std::uint32_t slot;
  std::uint32_t position;    // index of the sample inside the batch
  std::uint32_t generation;  // the slot's generation when planned (an invariant check)
};

class WorkQueue {
 public:
  void push(std::vector<WorkItem>&& items);
  // Blocks until an item is available or stop() was called (then returns false).
  bool pop(WorkItem& out);
  void stop();
  std::size_t depth() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<WorkItem> items_;  // guarded by mu_
  bool stopped_ = false;        // guarded by mu_
};

class WorkerPool {
 public:
  // Threads start at once; each builds its own per-job SampleProcessor.
  WorkerPool(unsigned threads, WorkQueue& queue, const std::vector<Job*>& jobs);
  ~WorkerPool();  // stops the queue and joins
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  unsigned size() const { return static_cast<unsigned>(threads_.size()); }

 private:
  void run(unsigned index);
  WorkQueue& queue_;
  std::vector<Job*> jobs_;
  std::vector<std::thread> threads_;
};

}  // namespace stoker::server
