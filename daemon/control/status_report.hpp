// The status document `stokerctl status` (and stoker.daemon_status) reads: the daemon, its
// device delivery, the last reload, and per job its settings, counters, rings and consumers.
// It only reads: the figures belong to the jobs, the sessions, the telemetry and the reloads.
// Threads: the control thread only.
#pragma once

#include <cstdint>
#include <string>

#include "control/forward.hpp"

namespace stoker::control {

class StatusReport {
 public:
  // Who this daemon is, as the document names it.
  struct Identity {
    std::string socket_path;
    std::uint64_t generation = 0;
    unsigned workers = 0;
  };
  StatusReport(Identity identity, const jobs::JobTable& jobs, const Sessions& sessions, const Telemetry& telemetry,
               const Reloads& reloads, delivery::DeviceDelivery& delivery, const JobSources& sources);

  // One JSON document; keys in a fixed order. `viewer_uid`: the asking session's uid, taken
  // at connect (SO_PEERCRED). Another uid's client-defined jobs (their roots, pipelines,
  // class names) are left out unless the viewer is root or stokerd's own user (issue #34, D4).
  std::string json(std::uint32_t viewer_uid) const;

 private:
  Identity identity_;
  const jobs::JobTable& jobs_;
  const Sessions& sessions_;
  const Telemetry& telemetry_;
  const Reloads& reloads_;
  delivery::DeviceDelivery& delivery_;  // not const: its counters are read under its own lock
  const JobSources& sources_;
};

}  // namespace stoker::control
