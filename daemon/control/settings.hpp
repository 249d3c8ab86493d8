// What the process (app/) tells the control socket at start: its timeouts and connection cap,
// where jobs come from while it runs, and the operations beside the loop. Plain values, kept
// apart from the classes that use them (the loop, the sessions, the commands, the telemetry)
// so that each of those includes only this, not the others.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "control/peer_access.hpp"

namespace stoker::sched {
class WorkerPool;
}  // namespace stoker::sched

namespace stoker::control {

class MetricsHttpServer;

// Timeouts and the connection cap (server.* in the config; max_connections already derived).
struct Limits {
  double handshake_timeout_s = 10;
  double idle_timeout_s = 5;
  std::size_t max_connections = 256;
  PeerPolicy access;  // who may connect (server.group); checked on every accept
};

// Where jobs come from while running: SIGHUP re-reads `config_file`; clients may define jobs
// (server.client_jobs), drained once unused for `client_job_linger_s`.
struct JobSources {
  std::filesystem::path config_file;  // empty: SIGHUP is logged and ignored (tests)
  std::filesystem::path state_dir;
  bool client_jobs = true;
  bool client_jobs_for_group = false;  // users other than stokerd's and root may define jobs too
  double client_job_linger_s = 30;
  std::vector<std::string> client_job_buckets;  // server.client_job_buckets
  // Client-defined jobs serving or loading at once: all users, and each uid (a load counts
  // from the moment it is started, so concurrent definitions cannot overshoot).
  std::size_t max_client_jobs = 16;
  std::size_t client_jobs_per_user = 8;
  double drain_timeout_s = 60;  // a draining job's consumers that do not finish are told then
};

// Operations beside the control loop (telemetry.hpp), all optional; set before run().
// Once a second the loop renders the metrics document for `http` and `textfile_dir`, and
// every `log_interval_s` it logs one throughput line.
struct Operations {
  MetricsHttpServer* http = nullptr;      // GET /metrics (server.metrics)
  std::filesystem::path textfile_dir;     // node_exporter textfile collector; empty: none
  const sched::WorkerPool* pool = nullptr;  // for the workers' busy fraction
  double log_interval_s = 0;              // 0: no throughput log
};

}  // namespace stoker::control
