#include "server/worker_pool.hpp"

#include <memory>

#include <spdlog/spdlog.h>

#include "image/sample_processor.hpp"
#include "server/job.hpp"

namespace stoker::server {

WorkerPool::WorkerPool(unsigned threads, WorkQueue& queue, const std::vector<Job*>& jobs)
    : queue_(queue), jobs_(jobs) {
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this, i] { run(i); });
}

WorkerPool::~WorkerPool() {
  queue_.stop();
  for (auto& t : threads_) t.join();
}

void WorkerPool::run(unsigned index) {
  // Processors are built lazily per job so a thread touches only the jobs it serves.
  std::vector<std::unique_ptr<image::SampleProcessor>> processors(jobs_.size());
  std::vector<std::uint8_t> file_buffer;
  WorkItem item{};
  std::size_t j = 0;
  while (queue_.pop(item, j)) {
    if (!processors[j]) {
      processors[j] = std::make_unique<image::SampleProcessor>(item.job->pipeline());
    }
    item.job->run(item, *processors[j], file_buffer);
    queue_.done(j);  // the job's place under its `workers` cap is free again
  }
  spdlog::debug("worker {} stopped", index);
}

}  // namespace stoker::server
