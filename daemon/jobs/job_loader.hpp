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
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "jobs/job_factory.hpp"

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

class JobLoader {
 public:
  explicit JobLoader(std::function<void()> wake) : wake_(std::move(wake)) {}
  ~JobLoader();  // waits for loads in progress
  JobLoader(const JobLoader&) = delete;
  JobLoader& operator=(const JobLoader&) = delete;

  // Re-reads `file`; jobs whose definition equals `serving[name]` are not loaded again.
  // false (nothing started) while an earlier reload is still loading.
  bool reload(std::filesystem::path file, std::filesystem::path state_dir,
              std::map<std::string, std::string> serving);
  // Loads one client-defined job, already parsed and validated on the control thread;
  // `read_as` as prepare_job's. The result carries `key` back.
  void define(std::string key, config::JobConfig job, std::filesystem::path state_dir, std::string origin,
              std::shared_ptr<const source::ReadAs> read_as);
  std::vector<LoadResult> take_done();
  bool busy() const;

 private:
  void finish(LoadResult r);
  std::function<void()> wake_;
  mutable std::mutex mu_;
  std::vector<std::thread> threads_;  // guarded by mu_; joined by take_done / the destructor
  std::vector<std::thread::id> finished_;
  std::vector<LoadResult> done_;      // guarded by mu_
  bool reloading_ = false;            // guarded by mu_
};

}  // namespace stoker::jobs
