// The decode/augment workers: N threads draining the WorkQueue (per-job FIFOs shared by
// weight, see work_queue.hpp). Each item is reported done() once run, so per-job caps hold.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "sched/work_queue.hpp"

namespace stoker::sched {

class Task;  // sched/task.hpp: what a job is to the pool

class WorkerPool {
 public:
  // Threads start at once; each builds its own per-job SampleProcessor.
  // Jobs reach the threads only through the queue's items (WorkItem::job).
  WorkerPool(unsigned threads, WorkQueue& queue);
  ~WorkerPool();  // stops the queue and joins
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  unsigned size() const { return static_cast<unsigned>(threads_.size()); }
  // Seconds the threads together spent running items (metrics: busy fraction = its rate / size()).
  double busy_seconds() const { return static_cast<double>(busy_ns_.load(std::memory_order_relaxed)) * 1e-9; }

 private:
  void run(unsigned index);
  WorkQueue& queue_;
  std::vector<std::thread> threads_;
  std::atomic<std::uint64_t> busy_ns_{0};
};

}  // namespace stoker::sched
