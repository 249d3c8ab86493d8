// The jobs stokerd serves while it runs. Jobs come (at start, by a SIGHUP reload, defined by a
// client) and go (removed or changed by a reload, `stokerctl drain`, a client-defined job
// whose consumers all left).
//
// Going is in two steps. Draining: the job plans no new batch, its consumers still get the
// batches already planned and are then told why the job ends (ControlServer); new consumers
// are refused. Removal: once no consumer is left, the job's work-queue lane is closed (queued
// items dropped, later pushes discarded) and, when no item of it is still running and no
// device copy reads its segment, the Job is destroyed (segment removed).
//
// Invariants: a job's index is never reused, so a WorkItem or a worker's per-job processor
// never names another job than the one it was made for; at most one serving (not draining)
// job has a given name. Threads: the control thread only (and daemon.cpp's start before the
// loop runs), so the table takes no lock; what a Job shares with its workers it locks itself.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "jobs/job_factory.hpp"
#include "remote/link_status.hpp"

namespace stoker::delivery {
class DeviceDelivery;
}  // namespace stoker::delivery

namespace stoker::remote {
class Dispatcher;
}  // namespace stoker::remote

namespace stoker::jobs {


class JobTable {
 public:
  struct Entry {
    std::unique_ptr<job::Job> job;
    std::string drain_reason;  // non-empty once draining: what its consumers are told
    std::chrono::steady_clock::time_point drain_started;
    bool lane_closed = false;
    // Client-defined jobs (stoker.Loader.from_folder): shared by every client of the same uid
    // that sends the same definition (`definition` is the key: uid and definition), drained
    // once unused for the linger time.
    bool defined_by_client = false;
    std::string definition;
    std::uint32_t defined_by_uid = 0;  // counted against server.client_jobs_per_user
    std::chrono::steady_clock::time_point unused_since;
    // remote: the job's remote workers (daemon/remote/dispatcher.hpp). After `job`, so it is
    // destroyed first (its threads use the job); the table also resets it before removing one.
    std::unique_ptr<remote::Dispatcher> remote;
    Entry();
    Entry(Entry&&) noexcept;
    Entry& operator=(Entry&&) noexcept;
    ~Entry();
  };

  JobTable(JobContext ctx, delivery::DeviceDelivery& delivery);
  ~JobTable();
  JobTable(const JobTable&) = delete;
  JobTable& operator=(const JobTable&) = delete;

  // Builds and starts the job (make_job + Job::start). Throws std::runtime_error as make_job.
  job::Job* add(PreparedJob prepared, bool defined_by_client = false, std::string definition = {}, std::uint32_t uid = 0);
  // The serving (not draining) job of that name, or null.
  job::Job* serving(std::string_view name) const;
  // The serving client-defined job with exactly this definition, or null.
  job::Job* defined(const std::string& definition) const;
  // Every job present, serving or draining, in the order they were added.
  std::vector<job::Job*> jobs() const;
  std::vector<job::Job*> serving_jobs() const;
  const Entry* entry(const job::Job* job) const;
  const JobContext& context() const { return ctx_; }
  // The job's remote workers, one entry per endpoint (empty without `remote:`).
  std::vector<remote::WorkerLinkStatus> remote_status(const job::Job* job) const;

  // Starts draining `job` (no-op if it already drains); `reason` ends the consumers' message.
  void drain(job::Job* job, std::string reason);
  // Control loop, every turn: client-defined jobs unused for `linger_s` start draining;
  // draining jobs with no consumer (`in_use` false) are removed as far as they can be.
  // Returns the names removed.
  std::vector<std::string> collect(const std::function<bool(const job::Job*)>& in_use, double linger_s);

 private:
  Entry* find(const job::Job* job);
  JobContext ctx_;
  delivery::DeviceDelivery& delivery_;
  std::vector<Entry> entries_;
  std::size_t next_index_ = 0;
};

}  // namespace stoker::jobs
