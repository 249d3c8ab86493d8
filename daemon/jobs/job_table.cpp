#include "jobs/job_table.hpp"

#include <algorithm>

#include "log/log.hpp"
#include "delivery/device_delivery.hpp"
#include "job/job.hpp"
#include "sched/work_queue.hpp"
#ifdef STOKER_WITH_REMOTE
#include "remote/dispatcher.hpp"
#else
namespace stoker::remote {
class Dispatcher {};  // built without gRPC: a job with `remote:` is refused in add()
}  // namespace stoker::remote
#endif

namespace stoker::jobs {

using job::Job;
using sched::WorkQueue;
using delivery::DeviceDelivery;

JobTable::Entry::Entry() = default;
JobTable::Entry::Entry(Entry&&) noexcept = default;
JobTable::Entry& JobTable::Entry::operator=(Entry&&) noexcept = default;
JobTable::Entry::~Entry() = default;

JobTable::JobTable(JobContext ctx, DeviceDelivery& delivery) : ctx_(std::move(ctx)), delivery_(delivery) {}

JobTable::~JobTable() {
  for (Entry& e : entries_) e.remote.reset();  // their threads end before any job goes
  // Workers are joined before the table goes (daemon.cpp's scopes); device copies may still
  // read the segments, which must also be unregistered before they are unmapped.
  for (Entry& e : entries_) {
    e.job->settle_device_copies();
    delivery_.forget_job(e.job.get());
  }
}

Job* JobTable::add(PreparedJob prepared, bool defined_by_client, std::string definition, std::uint32_t uid) {
  const std::size_t index = next_index_++;
  Entry e;
  e.job = make_job(std::move(prepared), index, ctx_);
  e.defined_by_client = defined_by_client;
  e.definition = std::move(definition);
  e.defined_by_uid = uid;
  e.unused_since = std::chrono::steady_clock::now();
  Job* job = e.job.get();
  if (job->config().remote.enabled()) {
#ifdef STOKER_WITH_REMOTE
    e.remote = std::make_unique<remote::Dispatcher>(*job, *ctx_.queue, job->config().remote);
#else
    throw std::runtime_error("job " + job->name() + ": remote: this stokerd was built without remote workers "
                             "(gRPC not found when it was built; scripts/setup.sh installs it)");
#endif
  }
  entries_.push_back(std::move(e));
  try {
    job->start();  // plans every ring: the first epoch's order is made here
  } catch (...) {
    entries_.pop_back();  // nothing was queued (Job::start pushes its items last)
    throw;
  }
  return job;
}

Job* JobTable::serving(std::string_view name) const {
  for (const Entry& e : entries_) {
    if (e.drain_reason.empty() && e.job->name() == name) return e.job.get();
  }
  return nullptr;
}

Job* JobTable::defined(const std::string& definition) const {
  for (const Entry& e : entries_) {
    if (e.drain_reason.empty() && e.defined_by_client && e.definition == definition) return e.job.get();
  }
  return nullptr;
}

std::vector<Job*> JobTable::jobs() const {
  std::vector<Job*> out;
  for (const Entry& e : entries_) out.push_back(e.job.get());
  return out;
}

std::vector<Job*> JobTable::serving_jobs() const {
  std::vector<Job*> out;
  for (const Entry& e : entries_) {
    if (e.drain_reason.empty()) out.push_back(e.job.get());
  }
  return out;
}

const JobTable::Entry* JobTable::entry(const Job* job) const {
  for (const Entry& e : entries_) {
    if (e.job.get() == job) return &e;
  }
  return nullptr;
}

JobTable::Entry* JobTable::find(const Job* job) {
  return const_cast<Entry*>(static_cast<const JobTable*>(this)->entry(job));
}

void JobTable::drain(Job* job, std::string reason) {
  Entry* e = find(job);
  if (e == nullptr || !e->drain_reason.empty()) return;
  e->drain_reason = reason.empty() ? "drained" : std::move(reason);
  e->drain_started = std::chrono::steady_clock::now();
  job->drain();
  stoker::log::info("job {}: draining ({}): no new batches; consumers get what is ready, then are told", job->name(),
                    e->drain_reason);
}

std::vector<std::string> JobTable::collect(const std::function<bool(const Job*)>& in_use, double linger_s) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::string> removed;
  for (Entry& e : entries_) {
    const bool used = in_use(e.job.get());
    if (e.defined_by_client && e.drain_reason.empty()) {
      if (used) {
        e.unused_since = now;
      } else if (std::chrono::duration<double>(now - e.unused_since).count() >= linger_s) {
        drain(e.job.get(), "client-defined job unused for " + std::to_string(static_cast<int>(linger_s)) + " s");
      }
    }
    if (e.drain_reason.empty() || used) continue;
    if (!e.lane_closed) {
      ctx_.queue->close(e.job->index());
      e.lane_closed = true;
    }
  }
  // Destroy what nothing refers to any more: no item running, no device copy reading.
  std::erase_if(entries_, [&](Entry& e) {
    if (!e.lane_closed) return false;
    e.remote.reset();  // its items in flight are given up: the lane is closed, the job goes
    if (ctx_.queue->in_flight(e.job->index()) != 0) return false;
    e.job->settle_device_copies();
    delivery_.forget_job(e.job.get());
    stoker::log::info("job {}: removed ({})", e.job->name(), e.drain_reason);
    removed.push_back(e.job->name());
    return true;
  });
  return removed;
}

std::vector<remote::WorkerLinkStatus> JobTable::remote_status(const Job* job) const {
  const Entry* e = entry(job);
#ifdef STOKER_WITH_REMOTE
  if (e != nullptr && e->remote) return e->remote->status();
#else
  (void)e;
#endif
  return {};
}

}  // namespace stoker::jobs
