// The control socket: one thread, one epoll loop over the listening socket, every client,
// a wake-up eventfd (a batch became ready) and a signalfd (SIGINT/SIGTERM).
//
// A client is either a consumer (Hello accepted: it owns one rank of one job) or a status
// reader. Anything malformed from a client evicts that client only.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "control/metrics_text.hpp"
#include "control/peer_access.hpp"
#include "stoker/proto/control.hpp"

namespace stoker::job {
class Job;
class WorkerPool;
}  // namespace stoker::job
namespace stoker::jobs {
class JobTable;
class JobLoader;
struct LoadResult;
}  // namespace stoker::jobs
namespace stoker::delivery {
class DeviceDelivery;
class DeviceRing;
class PeerProcess;
}  // namespace stoker::delivery

namespace stoker::control {

class MetricsHttpServer;

// What the process asks of the loop (app/): how often it turns at least, and what it does at
// each turn and when it ends (feeding systemd's watchdog and saying STOPPING=1, there).
struct LoopHooks {
  std::chrono::milliseconds turn{1000};
  std::function<void()> each_turn;
  std::function<void()> at_stop;
};

class ControlServer {
 public:
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
    // Client-defined jobs serving or loading at once: all users, and each uid (a load counts
    // from the moment it is started, so concurrent definitions cannot overshoot).
    std::size_t max_client_jobs = 16;
    std::size_t client_jobs_per_user = 8;
    double drain_timeout_s = 60;  // a draining job's consumers that do not finish are told then
  };
  // Binds the socket (mode 0600). Throws std::runtime_error naming the path on failure.
  // `delivery` serves consumers that ask for device batches (or says why it cannot).
  ControlServer(std::string socket_path, jobs::JobTable& jobs, std::uint64_t daemon_generation,
                unsigned workers, delivery::DeviceDelivery& delivery, const Limits& limits,
                JobSources sources);
  ~ControlServer();  // closes every client and unlinks the socket
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Operations beside the control loop (metrics_control.cpp), all optional; set before run().
  // Once a second the loop renders the metrics document for `http` and `textfile_dir`, and
  // every `log_interval_s` it logs one throughput line.
  struct Operations {
    MetricsHttpServer* http = nullptr;      // GET /metrics (server.metrics)
    std::filesystem::path textfile_dir;     // node_exporter textfile collector; empty: none
    const job::WorkerPool* pool = nullptr;       // for the workers' busy fraction
    double log_interval_s = 0;              // 0: no throughput log
  };
  void set_operations(Operations ops) { ops_ = std::move(ops); }

  // Thread-safe, async-signal-safe: wakes the loop to deliver ready batches.
  void notify();

  // Runs until SIGINT or SIGTERM (blocked by the caller in every thread beforehand).
  void run(const LoopHooks& hooks = {});
  // One turn of the loop: waits up to timeout_ms for events and handles them; false once a
  // stop signal arrived. (run() is this in a loop; the control-message fuzz harness drives it.)
  bool run_once(int timeout_ms);

 private:
  struct Session {
    int fd = -1;
    job::Job* job = nullptr;       // set once Hello is accepted
    std::uint32_t rank = 0;
    std::uint32_t reader = 0;  // of the rank's `readers` (fan-out)
    bool acquire_pending = false;
    std::uint32_t pid = 0;
    bool spoke = false;  // sent at least one valid message
    std::int32_t peer_pid = 0;                   // SO_PEERCRED: trusted, unlike Hello's pid
    std::uint32_t peer_uid = ~0u;                // SO_PEERCRED
    std::uint32_t peer_gid = ~0u;                // SO_PEERCRED
    std::uint64_t token = 0;                     // unique per connection (fds are reused)
    bool command_pending = false;                // a define_job reply is owed once loaded
    std::shared_ptr<delivery::DeviceRing> device;          // device consumers: the ring they map
    std::shared_ptr<delivery::PeerProcess> peer;           // device consumers: liveness of their process
    std::chrono::steady_clock::time_point connected_at;
    std::chrono::steady_clock::time_point last_message;  // for the idle timeout
    // Messages that did not fit the socket buffer yet (a status reply for thousands of
    // consumers is many messages); sent in order as the socket drains (EPOLLOUT).
    std::deque<std::vector<std::uint8_t>> outbox;
    std::size_t outbox_bytes = 0;
  };

  void accept_clients();
  void on_readable(Session& s);
  bool handle_message(Session& s, const std::uint8_t* data, std::size_t n);  // false: evict
  bool handle_hello(Session& s, const proto::HelloMsg& m);
  void deliver_ready();
  void send_error(Session& s, proto::ErrorCode code, const std::string& text);
  bool send_all(Session& s, const void* data, std::size_t n);
  // Sends queued messages while the socket takes them; false when the peer is gone or its
  // backlog exceeds the bound. Watches EPOLLOUT exactly while the outbox is not empty.
  bool flush(Session& s);
  bool send_status(Session& s);
  // One message with a descriptor attached (the Welcome and its job's segment).
  bool send_with_fd(Session& s, const void* data, std::size_t n, int fd);
  void evict(int fd, const char* why);
  std::string status_json() const;
  void sample_rates();
  void close_silent_connections();
  void evict_stuck_consumers();
  // Accepts a connection beyond the cap (or with no descriptor to spare) only to tell it why
  // and close it.
  void refuse(int fd, const std::string& why, proto::ErrorCode code = proto::ErrorCode::kTooManyConnections);

  // --- jobs coming and going (control_jobs.cpp) ---
  bool handle_command(Session& s, const std::uint8_t* data, std::size_t n);
  bool send_json(Session& s, const std::string& json, proto::MsgType type);
  // A reload asked for by SIGHUP (`waiter` null) or by a `reload` command (its connection is
  // told the outcome). While one loads, requests coalesce into one queued reload, started
  // once the running one is applied: the file is read again after the last request came.
  void request_reload(const std::string& requested_by, Session* waiter);
  void start_reload();
  void apply_loaded();
  void apply_reload(jobs::LoadResult& r);
  // Records the outcome (status "reload") and answers the connections that asked for it.
  void finish_reload(bool ok, const std::string& message);
  void apply_define(jobs::LoadResult& r);
  // "" when the peer may consume `job` or list its samples; else why not: a client-defined job
  // holds what its user could read, so only that uid (and stokerd's user, root) may use it.
  std::string client_job_refusal(const Session& s, const job::Job* job) const;
  // Consumers of draining jobs that got everything are told; removed jobs are collected.
  void settle_draining();
  void drain_job(job::Job* job, const std::string& reason);

  std::string socket_path_;
  jobs::JobTable& jobs_;
  JobSources sources_;
  // --- reloads (control_jobs.cpp); all on the control thread ---
  struct Waiter {  // a connection owed a reply (fds are reused: the token tells it is the same)
    int fd;
    std::uint64_t token;
  };
  struct ReloadOutcome {
    std::chrono::system_clock::time_point at;  // when it was applied or refused
    bool ok = false;
    std::string message;       // what was applied, or the refusal with FILE:LINE:COL
    std::string requested_by;  // "SIGHUP" or the command's peer ("pid P uid U")
  };
  bool reload_running_ = false;          // a reload's load is in progress (JobLoader)
  bool reload_queued_ = false;           // another starts once it is applied (at most one)
  std::string running_requested_by_, queued_requested_by_;
  std::vector<Waiter> reload_waiters_;   // told the outcome of the running reload
  std::vector<Waiter> queued_waiters_;   // told the outcome of the queued one
  std::optional<ReloadOutcome> last_reload_;
  std::unique_ptr<jobs::JobLoader> loader_;
  std::uint64_t next_token_ = 1;
  std::uint64_t daemon_generation_;
  unsigned workers_;
  delivery::DeviceDelivery& delivery_;
  Limits limits_;
  PeerGate gate_{limits_.access};  // after limits_: built from it
  // A descriptor held in reserve: when accept() fails with EMFILE/ENFILE it is closed, the
  // pending connection accepted, told why and closed, and the reserve reopened. Without it
  // the listening socket stays readable and the loop would spin at 100% of a core.
  int spare_fd_ = -1;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int event_fd_ = -1;
  int signal_fd_ = -1;
  std::map<int, Session> sessions_;
  std::vector<int> doomed_;   // fds to close after the current event batch
  // Client job definitions loading (control_jobs.cpp), by key (uid + definition): who defined
  // it and the connections (fd, token) waiting for its reply. One load per key, however many
  // ranks send it; counted with the serving client jobs against both caps.
  struct Defining {
    std::uint32_t uid = 0;
    std::vector<std::pair<int, std::uint64_t>> waiters;
  };
  std::map<std::string, Defining> defining_;

  // images/s over the last sampling interval, per job
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point last_sample_;
  // (time, samples_ok per job index), one a second, oldest first, spanning the rate window.
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::map<std::size_t, std::uint64_t>>> rate_history_;
  std::map<std::size_t, double> rates_;  // by job index

  // --- operations (metrics_control.cpp) ---
  // Trainer wait reported with releases (protocol 2.3), per (job index, rank, reader); kept
  // across reconnects so the totals only grow (they are Prometheus counters).
  struct ConsumerWait {
    double wait_s = 0;
    std::uint64_t releases = 0;  // all releases
    std::uint64_t reported = 0;  // releases that carried a wait (2.3 clients)
    std::chrono::steady_clock::time_point since{};  // when the first reporting session connected
  };
  using ConsumerKey = std::tuple<std::size_t, std::uint32_t, std::uint32_t>;
  void note_release_wait(const Session& s, std::optional<std::uint64_t> wait_ns);
  // Fraction of the last 10 s the consumer's trainer spent waiting for data; of the time since
  // it connected when that is shorter.
  double wait_fraction(const ConsumerKey& k) const;
  void run_operations(std::chrono::steady_clock::time_point now);  // once a second
  std::string metrics_text() const;
  std::string throughput_line() const;
  Operations ops_;
  std::map<ConsumerKey, ConsumerWait> waits_;
  CounterWindow op_window_{std::chrono::seconds(10)};  // keys: "busy", "wait/J/R/K"
  std::chrono::steady_clock::time_point last_log_{};
  bool textfile_failing_ = false;  // logged once per failure streak
};

}  // namespace stoker::control
