// The Command message (a JSON object with an "op"): `define_job` (job_definitions.hpp),
// `reload` (reloads.hpp), `drain` and `samples` (here), with who may ask for each; and the
// jobs' coming and going that follows: loads finished on JobLoader's threads are applied,
// draining jobs whose consumers are done (or overdue) are removed.
//
// Loading (a scan, a tar index) happens on JobLoader's threads; everything here runs on the
// control thread, so the jobs that are not touched keep being served throughout.
// Threads: the control thread only; no lock (JobLoader locks its own hand-over).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "control/forward.hpp"
#include "control/job_definitions.hpp"
#include "control/reloads.hpp"
#include "control/settings.hpp"

namespace stoker::control {

class Commands {
 public:
  // `wake`: wakes the control loop (a load finished; a drained job's consumers must be told).
  Commands(jobs::JobTable& jobs, Sessions& sessions, const JobSources& sources, std::function<void()> wake);
  ~Commands();  // stop_loads()

  // A Command message, header included. false: evict the client.
  bool handle(Session& s, const std::uint8_t* data, std::size_t n);
  // SIGHUP.
  void request_reload_by_signal() { reloads_.request("SIGHUP", nullptr); }
  // Once a turn: loads that finished are applied (reloads, definitions).
  void apply_loaded();
  // Once a turn: consumers of draining jobs past drain_timeout_s are told; client jobs unused
  // for the linger time start draining; drained jobs nobody uses are removed.
  void settle_draining();
  // Waits for loads in progress (they wake the loop: call before its eventfd closes).
  void stop_loads();

  const Reloads& reloads() const { return reloads_; }

 private:
  void drain_job(job::Job* job, const std::string& reason);

  jobs::JobTable& jobs_;
  Sessions& sessions_;
  const JobSources& sources_;  // ControlServer's, which outlives this
  std::function<void()> wake_;
  std::unique_ptr<jobs::JobLoader> loader_;  // before reloads_ and definitions_, which use it
  Reloads reloads_;
  JobDefinitions definitions_;
};

}  // namespace stoker::control
