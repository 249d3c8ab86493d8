#include "sched/work_queue.hpp"

#include <algorithm>
#include <limits>
#include <utility>

#include "sched/task.hpp"

namespace stoker::sched {

WorkQueue::WorkQueue(std::vector<JobShare> shares) {
  lanes_.resize(shares.size());
  for (std::size_t i = 0; i < shares.size(); ++i) lanes_[i].share = shares[i];
}

WorkQueue::Lane& WorkQueue::lane(std::size_t job) {
  if (job >= lanes_.size()) lanes_.resize(job + 1);
  return lanes_[job];
}

bool WorkQueue::runnable(const Lane& l) const {
  return !l.items.empty() && !l.remote_only && (l.share.max_workers == 0 || l.running < l.share.max_workers);
}

WorkQueue::Lane* WorkQueue::next_lane() {
  Lane* best = nullptr;
  for (Lane& l : lanes_) {
    if (runnable(l) && (best == nullptr || l.vtime < best->vtime)) best = &l;
  }
  return best;
}

void WorkQueue::wake(Lane& l, std::size_t job) {
  // Only a job with nothing queued and nothing running is idle; one whose queue merely ran
  // dry between batches keeps its place.
  if (!l.items.empty() || l.running > 0) return;
  double floor = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < lanes_.size(); ++i) {
    const Lane& o = lanes_[i];
    if (i != job && (!o.items.empty() || o.running > 0)) floor = std::min(floor, o.vtime);
  }
  l.vtime = std::max(l.vtime, floor != std::numeric_limits<double>::infinity() ? floor : clock_);
}

void WorkQueue::set_share(std::size_t job, JobShare share) {
  base::MutexLock lock(mu_);
  lane(job).share = share;
}

void WorkQueue::close(std::size_t job) {
  base::MutexLock lock(mu_);
  Lane& l = lane(job);
  l.closed = true;
  queued_ -= l.items.size();
  l.items.clear();
  l.items.shrink_to_fit();
  closures_.fetch_add(1, std::memory_order_release);
}

bool WorkQueue::closed(std::size_t job) const {
  base::MutexLock lock(mu_);
  return job < lanes_.size() && lanes_[job].closed;
}

void WorkQueue::push(std::size_t job, std::vector<WorkItem>&& items) {
  if (items.empty()) return;
  bool local = true;
  {
    base::MutexLock lock(mu_);
    Lane& l = lane(job);
    if (l.closed) return;  // the job is being removed (its batches are no longer wanted)
    wake(l, job);
    l.items.insert(l.items.end(), items.begin(), items.end());
    queued_ += items.size();
    local = !l.remote_only;
  }
  // A remote-only lane's items are no local worker's: waking the idle ones for each batch cost
  // the GPU node two context switches a batch for nothing (issue #36). set_remote_only(false)
  // wakes them itself, after the flag changes under mu_, so no push is missed.
  if (local) {
    if (items.size() == 1) {
      cv_.notify_one();
    } else {
      cv_.notify_all();
    }
  }
  remote_cv_.notify_all();
}

void WorkQueue::push_front(std::size_t job, std::vector<WorkItem>&& items) {
  if (items.empty()) return;
  {
    base::MutexLock lock(mu_);
    Lane& l = lane(job);
    if (l.closed) return;
    wake(l, job);
    l.items.insert(l.items.begin(), items.begin(), items.end());
    queued_ += items.size();
  }
  cv_.notify_all();
  remote_cv_.notify_all();
}

void WorkQueue::set_remote_only(std::size_t job, bool remote_only) {
  {
    base::MutexLock lock(mu_);
    lane(job).remote_only = remote_only;
  }
  cv_.notify_all();  // local workers may take its items again
}

std::size_t WorkQueue::queued(std::size_t job) const {
  base::MutexLock lock(mu_);
  return job < lanes_.size() ? lanes_[job].items.size() : 0;
}

bool WorkQueue::remote_may_take(const Lane& l) const {
  // Local workers first: an idle one will take the item, unless the lane is remote-only or
  // the job's `workers` cap keeps local workers off it.
  return l.remote_only || idle_ == 0 || (l.share.max_workers != 0 && l.running >= l.share.max_workers);
}

bool WorkQueue::pop_remote(std::size_t job, WorkItem& out, std::chrono::milliseconds wait) {
  base::MutexLock lock(mu_);
  const auto until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    if (stopped_) return false;
    Lane& l = lane(job);
    if (l.closed) return false;
    if (!l.items.empty() && remote_may_take(l)) {
      out = l.items.front();
      l.items.pop_front();
      --queued_;
      clock_ = std::max(clock_, l.vtime);
      l.vtime += 1.0 / l.share.weight;  // remote items count in the job's fair share too
      return true;
    }
    if (remote_cv_.wait_for(lock, until - std::chrono::steady_clock::now()) == std::cv_status::timeout) {
      // One last look: an item queued while a local worker was idle may still be there.
      Lane& again = lane(job);
      if (stopped_ || again.closed || again.items.empty() || !remote_may_take(again)) return false;
    }
  }
}

void WorkQueue::push(std::vector<WorkItem>&& items) {
  if (items.empty()) return;
  // A job pushes only its own items; group runs of one job so each lane is woken once.
  std::size_t begin = 0;
  while (begin < items.size()) {
    const std::size_t job = items[begin].job->index();
    std::size_t end = begin + 1;
    while (end < items.size() && items[end].job->index() == job) ++end;
    if (begin == 0 && end == items.size()) return push(job, std::move(items));
    push(job, std::vector<WorkItem>(items.begin() + static_cast<std::ptrdiff_t>(begin),
                                    items.begin() + static_cast<std::ptrdiff_t>(end)));
    begin = end;
  }
}

bool WorkQueue::pop(WorkItem& out, std::size_t& job) {
  base::MutexLock lock(mu_);
  Lane* l = nullptr;
  while (!stopped_ && (l = next_lane()) == nullptr) {
    ++idle_;
    cv_.wait(lock);
    --idle_;
  }
  if (stopped_) return false;
  const bool last_idle = idle_ == 0;
  out = l->items.front();
  l->items.pop_front();
  --queued_;
  ++l->running;
  clock_ = std::max(clock_, l->vtime);
  l->vtime += 1.0 / l->share.weight;
  job = static_cast<std::size_t>(l - lanes_.data());
  if (last_idle && queued_ > 0) remote_cv_.notify_all();  // no local worker idles: remote may take
  return true;
}

void WorkQueue::done(std::size_t job) {
  bool wake_one = false;
  {
    base::MutexLock lock(mu_);
    Lane& l = lane(job);
    if (l.running == 0) return;  // a done() without its pop(): nothing was counted
    // Invariant: running <= max_workers; this done() may be what a capped lane waits for.
    wake_one = l.share.max_workers != 0 && l.running == l.share.max_workers && !l.items.empty();
    --l.running;
  }
  if (wake_one) cv_.notify_one();
}

void WorkQueue::stop() {
  {
    base::MutexLock lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
  remote_cv_.notify_all();
}

std::size_t WorkQueue::depth() const {
  base::MutexLock lock(mu_);
  return queued_;
}

std::size_t WorkQueue::in_flight(std::size_t job) const {
  base::MutexLock lock(mu_);
  return job < lanes_.size() ? lanes_[job].running : 0;
}

}  // namespace stoker::sched
