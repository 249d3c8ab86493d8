// Turning a job of the config into a running Job: the dataset is loaded (a scan, a list or a
// tar index: the slow part, safe on any thread), then the Job is built (its segment: fast,
// on the control thread). Used at start, by a SIGHUP reload and for client-defined jobs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "config/config.hpp"
#include "source/dataset.hpp"

namespace stoker::job {
class Job;
}  // namespace stoker::job
namespace stoker::sched {
class WorkQueue;
}  // namespace stoker::sched

namespace stoker::jobs {


// A job whose dataset is loaded and whose quarantine path is settled.
struct PreparedJob {
  config::JobConfig config;
  source::Dataset dataset;
};

// <job>-<16 hex>: keyed by the dataset's identity (source type, root, list, shard patterns),
// so the same job name pointed at another dataset does not read this one's state.
std::string dataset_state_name(const config::JobConfig& jc);

// Loads the job's dataset and logs what it found. Throws config::ConfigError pointing at the
// job's source key (with `config_file`) when the source cannot be read. `read_as`: a
// client-defined job of another user; the dataset is loaded, and later read, only where that
// user could read (source/read_access.hpp).
PreparedJob prepare_job(config::JobConfig jc, const std::filesystem::path& state_dir,
                        const std::string& config_file, std::shared_ptr<const source::ReadAs> read_as = nullptr);

// What the daemon needs to build any job.
struct JobContext {
  std::string socket;            // segment names derive from it
  unsigned shm_mode = 0600;
  std::uint64_t generation = 0;  // this daemon's, written into every segment
  unsigned workers = 1;          // for the log line about sharing
  sched::WorkQueue* queue = nullptr;
  std::function<void()> notify;  // a batch became ready
};

// Builds the Job (its segment and rings) as job number `index`, with its share of the
// workers set in the queue. Throws std::runtime_error when the segment cannot be made.
std::unique_ptr<job::Job> make_job(PreparedJob prepared, std::size_t index, const JobContext& ctx);

}  // namespace stoker::jobs
