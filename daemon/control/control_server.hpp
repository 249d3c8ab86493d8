// The control socket's loop (iceoryx keeps RouDi, the loop, apart from ProcessManager, the
// clients; so does this): one thread, one epoll set over the listening socket, every client,
// a wake-up eventfd (a batch became ready, a load finished) and a signalfd (SIGINT/SIGTERM
// stop, SIGHUP reloads). It accepts and admits connections and, once a turn, lets the parts
// below do their housekeeping. The parts, each a class with the state it owns:
//   Sessions      (sessions.hpp)       the clients: handshake, attach, lease/release,
//                                      delivery of ready batches, sends, eviction
//   Commands      (commands.hpp)       define_job, drain, reload, samples; applying loads;
//                                      draining and removing jobs
//   StatusReport  (status_report.hpp)  the status document
//   Telemetry     (telemetry.hpp)      rates, trainer waits, /metrics, textfile, throughput log
//
// Threads: everything runs on the control thread except notify(), so the loop's state and its
// parts' take no lock; the jobs lock their own shared state (job/).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "control/commands.hpp"
#include "control/forward.hpp"
#include "control/peer_access.hpp"
#include "control/sessions.hpp"
#include "control/settings.hpp"
#include "control/status_report.hpp"
#include "control/telemetry.hpp"
#include "stoker/proto/control.hpp"

namespace stoker::control {

// What the process asks of the loop (app/): how often it turns at least, and what it does at
// each turn and when it ends (feeding systemd's watchdog and saying STOPPING=1, there).
struct LoopHooks {
  std::chrono::milliseconds turn{1000};
  std::function<void()> each_turn;
  std::function<void()> at_stop;
};

class ControlServer {
 public:
  using Limits = control::Limits;          // settings.hpp
  using JobSources = control::JobSources;  // settings.hpp
  using Operations = control::Operations;  // settings.hpp

  // Binds the socket (mode 0600). Throws std::runtime_error naming the path on failure.
  // `delivery` serves consumers that ask for device batches (or says why it cannot).
  ControlServer(std::string socket_path, jobs::JobTable& jobs, std::uint64_t daemon_generation,
                unsigned workers, delivery::DeviceDelivery& delivery, const Limits& limits,
                JobSources sources);
  ~ControlServer();  // waits for loads, closes every client and unlinks the socket
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Operations beside the control loop (settings.hpp), all optional; set before run().
  void set_operations(Operations ops) { telemetry_.set_operations(std::move(ops)); }

  // Thread-safe, async-signal-safe: wakes the loop to deliver ready batches.
  void notify();

  // Runs until SIGINT or SIGTERM (blocked by the caller in every thread beforehand).
  void run(const LoopHooks& hooks = {});
  // One turn of the loop: waits up to timeout_ms for events and handles them; false once a
  // stop signal arrived. (run() is this in a loop; the control-message fuzz harness drives it.)
  bool run_once(int timeout_ms);

 private:
  void accept_clients();
  // Accepts a connection beyond the cap (or with no descriptor to spare) only to tell it why
  // and close it.
  void refuse(int fd, const std::string& why, proto::ErrorCode code = proto::ErrorCode::kTooManyConnections);

  std::string socket_path_;
  jobs::JobTable& jobs_;  // for retry_planning each turn
  delivery::DeviceDelivery& delivery_;
  Limits limits_;
  JobSources sources_;
  PeerGate gate_{limits_.access};  // after limits_: built from it
  // A descriptor held in reserve: when accept() fails with EMFILE/ENFILE it is closed, the
  // pending connection accepted, told why and closed, and the reserve reopened. Without it
  // the listening socket stays readable and the loop would spin at 100% of a core.
  int spare_fd_ = -1;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;  // made first: the sessions join it
  int event_fd_ = -1;
  int signal_fd_ = -1;
  // The parts, in the order they are built (each refers only to those before it) and torn
  // down in reverse; ~ControlServer stops the loads and closes the sessions first.
  Sessions sessions_;
  Telemetry telemetry_;
  Commands commands_;
  StatusReport status_;
};

}  // namespace stoker::control
