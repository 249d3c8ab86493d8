#include "server/worker_pool.hpp"

#include <memory>

#include <spdlog/spdlog.h>

#include "image/sample_processor.hpp"
#include "server/job.hpp"

namespace stoker::server {

void WorkQueue::push(std::vector<WorkItem>&& items) {
  if (items.empty()) return;
  {
    std::lock_guard lock(mu_);
    for (const auto& it : items) items_.push_back(it);
  }
  if (items.size() == 1) {
    cv_.notify_one();
  } else {
    cv_.notify_all();
  }
}

bool WorkQueue::pop(WorkItem& out) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return stopped_ || !items_.empty(); });
  if (stopped_) return false;
  out = items_.front();
  items_.pop_front();
  return true;
}

void WorkQueue::stop() {
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
}

std::size_t WorkQueue::depth() const {
  std::lock_guard lock(mu_);
  return items_.size();
}

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
  while (queue_.pop(item)) {
    const std::size_t j = item.job->index();
    if (!processors[j]) {
      processors[j] = std::make_unique<image::SampleProcessor>(item.job->pipeline());
    }
    item.job->run(item, *processors[j], file_buffer);
  }
  spdlog::debug("worker {} stopped", index);
}

}  // namespace stoker::server
