// Reloads of the config file while the daemon runs, asked for by SIGHUP or by the `reload`
// command (`stokerctl reload`, whose connection is told the outcome). The file and the new or
// changed jobs' datasets load on JobLoader's threads; the result is applied here, on the
// control thread: removed jobs drain, changed ones drain and restart, new ones start, and
// the jobs that are not touched keep serving throughout.
//
// While one loads, requests coalesce into one queued reload, started once the running one is
// applied: the file is read again after the last request came.
// Threads: the control thread only; no lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "control/forward.hpp"
#include "control/settings.hpp"

namespace stoker::control {

class Reloads {
 public:
  struct Outcome {
    std::chrono::system_clock::time_point at;  // when it was applied or refused
    bool ok = false;
    std::string message;       // what was applied, or the refusal with FILE:LINE:COL
    std::string requested_by;  // "SIGHUP" or the command's peer ("pid P uid U")
  };
  // `drain`: starts draining a job (and wakes the loop so its consumers are told).
  Reloads(jobs::JobLoader& loader, jobs::JobTable& jobs, Sessions& sessions, const JobSources& sources,
          std::function<void(job::Job*, const std::string&)> drain);

  // A reload asked for by SIGHUP (`waiter` null) or by a `reload` command (that connection is
  // told the outcome once it is applied or refused).
  void request(const std::string& requested_by, Session* waiter);
  // A reload's load finished (JobLoader::take_done): applies it, then starts the queued one.
  void apply(jobs::LoadResult& r);

  // "idle", "loading" or "loading, one more queued" (the status document).
  const char* state() const;
  // The last reload's outcome; none before the first.
  const std::optional<Outcome>& last() const { return last_; }

 private:
  struct Waiter {  // a connection owed a reply (fds are reused: the token tells it is the same)
    int fd;
    std::uint64_t token;
  };
  void start();
  // Records the outcome (status "reload") and answers the connections that asked for it.
  void finish(bool ok, const std::string& message);

  jobs::JobLoader& loader_;
  jobs::JobTable& jobs_;
  Sessions& sessions_;
  const JobSources& sources_;  // ControlServer's, which outlives this
  std::function<void(job::Job*, const std::string&)> drain_;
  bool running_ = false;  // a reload's load is in progress (JobLoader)
  bool queued_ = false;   // another starts once it is applied (at most one)
  std::string running_requested_by_, queued_requested_by_;
  std::vector<Waiter> running_waiters_;  // told the outcome of the running reload
  std::vector<Waiter> queued_waiters_;   // told the outcome of the queued one
  std::optional<Outcome> last_;
};

}  // namespace stoker::control
