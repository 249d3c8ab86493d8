// Loads jobs off the control thread: a SIGHUP reload (the config file, then the datasets of
// new and changed jobs) and client job definitions (one job's dataset). A scan of a large
// tree or a first tar index takes seconds; the control thread must go on serving the jobs
// that are not touched, so it only starts a load here and applies the result when it is done
// (it is woken through `wake`).
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "jobs/job_factory.hpp"
#include "base/mutex.hpp"

namespace stoker::jobs {

struct LoadResult {
  enum class Kind { kReload, kDefine } kind = Kind::kReload;
  std::string error;                 // non-empty: refused (config error text, file:line)
  // kReload: the new config; prepared[i] is set for jobs[i] when it is new or changed.
  std::optional<config::Config> config;
  std::vector<std::optional<PreparedJob>> prepared;
  // kDefine: the definition's key (the defining uid and the canonical definition: the
  // clients waiting for it are found by it) and the prepared job.
  std::string definition;
  std::optional<PreparedJob> job;
};

// The refusal a client gets when building its job runs out of memory (std::bad_alloc): it
// names the job and the keys that size what a job allocates when it starts.
std::string client_job_out_of_memory(const std::string& job_name);

class JobLoader {
 public:
  explicit JobLoader(std::function<void()> wake) : wake_(std::move(wake)) {}
  ~JobLoader();  // waits for loads in progress
  JobLoader(const JobLoader&) = delete;
  JobLoader& operator=(const JobLoader&) = delete;

  // Re-reads `file`; jobs whose definition equals `serving[name]` are not loaded again.
  // false (nothing started) while an earlier reload is still loading.
  bool reload(std::filesystem::path file, std::filesystem::path state_dir,
              std::map<std::string, std::string> serving) STOKER_EXCLUDES(mu_);
  // Loads one client-defined job, already parsed and validated on the control thread;
  // `read_as` as prepare_job's. The result carries `key` back.
  void define(std::string key, config::JobConfig job, std::filesystem::path state_dir, std::string origin,
              std::shared_ptr<const source::ReadAs> read_as) STOKER_EXCLUDES(mu_);
  std::vector<LoadResult> take_done() STOKER_EXCLUDES(mu_);
  bool busy() const STOKER_EXCLUDES(mu_);

 private:
  // On a load's own thread, last: hands the result over, then wakes the control thread.
  void finish(LoadResult r) STOKER_EXCLUDES(mu_);
  std::function<void()> wake_;  // set once; called without mu_ held
  // Shared by the control thread (which starts loads and takes results) and the load threads
  // (which hand results over). Nothing else here is shared.
  mutable base::Mutex mu_;
  // Joined by take_done (once finished) or the destructor.
  std::vector<std::thread> threads_ STOKER_GUARDED_BY(mu_);
  std::vector<std::thread::id> finished_ STOKER_GUARDED_BY(mu_);  // returned from finish(): join at once
  std::vector<LoadResult> done_ STOKER_GUARDED_BY(mu_);
  bool reloading_ STOKER_GUARDED_BY(mu_) = false;
};

}  // namespace stoker::jobs
