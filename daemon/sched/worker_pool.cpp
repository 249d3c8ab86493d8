#include "sched/worker_pool.hpp"

#include <map>
#include <chrono>
#include <memory>

#include "log/log.hpp"
#include "image/sample_processor.hpp"
#include "sched/task.hpp"

namespace stoker::sched {

WorkerPool::WorkerPool(unsigned threads, WorkQueue& queue) : queue_(queue) {
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this, i] { run(i); });
}

WorkerPool::~WorkerPool() {
  queue_.stop();
  for (auto& t : threads_) t.join();
}

void WorkerPool::run(unsigned index) {
  // Processors are built lazily per job so a thread touches only the jobs it serves. Jobs come
  // and go while the daemon runs (job_table.hpp); an index is never reused, so a processor is
  // only ever used for the job it was built for, and the processors of removed jobs (whose
  // lanes are closed) are dropped when this thread next takes an item after a closure.
  std::map<std::size_t, std::unique_ptr<image::SampleProcessor>> processors;
  std::vector<std::uint8_t> file_buffer;
  WorkItem item{};
  std::size_t j = 0;
  std::uint64_t closures_seen = 0;
  while (queue_.pop(item, j)) {
    if (const std::uint64_t c = queue_.closures(); c != closures_seen) {
      closures_seen = c;
      std::erase_if(processors, [this](const auto& kv) { return queue_.closed(kv.first); });
    }
    std::unique_ptr<image::SampleProcessor>& p = processors[j];
    if (!p) p = std::make_unique<image::SampleProcessor>(item.job->pipeline());
    const auto t0 = std::chrono::steady_clock::now();
    item.job->run(item, *p, file_buffer);
    busy_ns_.fetch_add(static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - t0).count()),
                       std::memory_order_relaxed);
    queue_.done(j);  // the job's place under its `workers` cap is free again
  }
  stoker::log::debug("worker {} stopped", index);
}

}  // namespace stoker::sched
