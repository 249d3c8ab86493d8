#include "app/daemon.hpp"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <map>
#include <cctype>
#include <filesystem>
#include <memory>
#include <sys/resource.h>
#include <random>
#include <thread>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "log/log.hpp"
#include "config/config.hpp"
#include "delivery/device_delivery.hpp"
#include "control/control_server.hpp"
#include "app/instance_lock.hpp"
#include "job/job.hpp"
#include "jobs/job_factory.hpp"
#include "jobs/job_table.hpp"
#include "control/metrics_http.hpp"
#include "app/sd_notify.hpp"
#include "app/state_dir.hpp"
#include "sched/worker_pool.hpp"
#include "source/dataset.hpp"
#include "stoker/proto/names.hpp"

namespace stoker::app {

using control::ControlServer;
using control::MetricsHttpServer;
using delivery::DeviceDelivery;
using job::Job;
using sched::WorkerPool;
using sched::WorkQueue;
using jobs::JobContext;
using jobs::JobTable;
using jobs::PreparedJob;
namespace {

// Raises the soft descriptor limit to the hard one (systemd's default soft limit is 1024, and
// every connection and every read in flight takes one). Returns the limit now in force.
std::uint64_t raise_open_files_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
  const rlim_t before = rl.rlim_cur;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) rl.rlim_cur = before;
  }
  if (rl.rlim_cur != before) stoker::log::info("descriptor limit raised from {} to {}", before, rl.rlim_cur);
  return rl.rlim_cur == RLIM_INFINITY ? (1u << 20) : static_cast<std::uint64_t>(rl.rlim_cur);
}

// Connections allowed when server.max_connections is not set: what the limit leaves after a
// reserve for the daemon's own files (segments, log, epoll...), two per worker (a sample being
// read, a spare) and per job, counting two per connection (a device consumer's pidfd too).
std::size_t default_max_connections(std::uint64_t open_files, unsigned workers, std::size_t jobs) {
  const std::uint64_t reserve = 32 + 2ull * workers + 4ull * jobs;
  const std::uint64_t left = open_files > reserve ? open_files - reserve : 0;
  return static_cast<std::size_t>(std::clamp<std::uint64_t>(left / 2, 4, 65536));
}

std::uint64_t new_generation() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^
         static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

}  // namespace

int run_daemon(const DaemonOptions& options) {
  config::Config cfg;
  std::vector<PreparedJob> prepared;
  std::string socket;
  std::filesystem::path state_dir;
  try {
    cfg = config::load_config(options.config_path);
    // Logging is set up before the sources load: indexing tar shards reports progress.
    const std::string level = !options.log_level.empty() ? options.log_level : cfg.server.log_level;
    spdlog::set_level(spdlog::level::from_str(level));
    spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [stokerd] [%^%l%$] %v");
    socket = proto::resolve_socket_path(options.socket_path, cfg.server.socket);
    state_dir = resolve_state_dir(options.state_dir, cfg.server.state_dir, socket);
    for (const auto& job : cfg.jobs) prepared.push_back(jobs::prepare_job(job, state_dir, cfg.file.string()));
  } catch (const config::ConfigError& e) {
    std::fprintf(stderr, "stokerd: config refused: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stokerd: %s\n", e.what());
    return 2;
  }

  unsigned workers = options.workers > 0 ? static_cast<unsigned>(options.workers) : cfg.server.workers;
  if (workers == 0) workers = std::max(1u, std::thread::hardware_concurrency());

  // Signals are taken by the control loop's signalfd; block them before any thread starts.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);  // reload
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  const std::uint64_t open_files = raise_open_files_limit();

  try {
    InstanceLock lock(socket);
    const std::uint64_t generation = new_generation();

    // Device delivery is chosen at run time (STOKER_DEVICE_BACKEND, default cuda): without a
    // usable device stokerd says so once and serves host batches. It outlives the jobs: their
    // device rings are freed through it.
    std::string no_device;
    std::unique_ptr<device::Backend> backend;
    if (device::BackendResult made = device::make_exporter_backend(); made) {
      backend = std::move(made).value();
    } else {
      no_device = made.status().message();
    }
    DeviceDelivery delivery(std::move(backend), no_device);
    {
      bool wanted = false;
      for (const auto& jc : cfg.jobs) wanted = wanted || jc.device_output;
      if (delivery.available()) {
        stoker::log::info("device delivery: {}", delivery.describe());
      } else if (wanted) {
        stoker::log::warn("device output unavailable ({}); serving host batches", no_device);
      } else {
        stoker::log::info("device output unavailable ({}); serving host batches", no_device);
      }
    }

    // One lane per job (its index): how the jobs share the pool (work_queue.hpp).
    WorkQueue queue;
    std::atomic<ControlServer*> server_ptr{nullptr};
    JobContext ctx;
    ctx.socket = socket;
    ctx.shm_mode = cfg.server.shm_mode;
    ctx.generation = generation;
    ctx.workers = workers;
    ctx.queue = &queue;
    ctx.notify = [&server_ptr] {
      if (ControlServer* s = server_ptr.load()) s->notify();
    };
    {
      // The table outlives the workers (they hold WorkItems naming its jobs) and the server.
      JobTable table(ctx, delivery);
      std::vector<Job*> started;
      for (auto& p : prepared) started.push_back(table.add(std::move(p)));
      ControlServer::Limits limits;
      limits.handshake_timeout_s = cfg.server.handshake_timeout_s;
      limits.idle_timeout_s = cfg.server.idle_timeout_s;
      limits.max_connections = cfg.server.max_connections != 0
                                   ? cfg.server.max_connections
                                   : default_max_connections(open_files, workers, started.size());
      stoker::log::info("descriptors: limit {}, at most {} connections (server.max_connections{})", open_files,
                        limits.max_connections, cfg.server.max_connections != 0 ? "" : " derived from the limit");
      ControlServer::JobSources sources;
      sources.config_file = std::filesystem::absolute(options.config_path);
      sources.state_dir = state_dir;
      sources.client_jobs = cfg.server.client_jobs;
      sources.client_jobs_for_group = cfg.server.client_jobs_for_group;
      sources.client_jobs_per_user = cfg.server.client_jobs_per_user;
      sources.client_job_linger_s = cfg.server.client_job_linger_s;
      sources.client_job_buckets = cfg.server.client_job_buckets;
      sources.drain_timeout_s = cfg.server.drain_timeout_s;
      limits.access.owner = ::geteuid();  // who may connect: peer_access.hpp
      if (!cfg.server.group.empty()) {
        limits.access.group = cfg.server.group_id;
        limits.access.group_name = cfg.server.group;
      }
      ControlServer server(socket, table, generation, workers, delivery, limits, sources);
      control::apply_socket_access(socket, limits.access);  // 0660 and server.group's, or the bound 0600
      server_ptr.store(&server);
      {
        WorkerPool pool(workers, queue);
        // --- operations: /metrics, node_exporter textfile, throughput log (metrics_*.cpp) ---
        std::unique_ptr<MetricsHttpServer> metrics;
        if (!cfg.server.metrics.empty()) {
          metrics = std::make_unique<MetricsHttpServer>(cfg.server.metrics_host, cfg.server.metrics_port);
          stoker::log::info("metrics on http://{}/metrics", metrics->address());
        }
        server.set_operations({metrics.get(), cfg.server.metrics_textfile, &pool, cfg.server.log_interval_s});
        // --- end operations ---
        stoker::log::info("stokerd ready on {} with {} worker(s)", socket, workers);
        SdNotify systemd;  // Type=notify: ready once every job is planned and the socket listens
        std::string names;
        for (Job* j : started) names += (names.empty() ? "" : ", ") + j->name();
        systemd.send("READY=1\nSTATUS=serving " + std::to_string(started.size()) + " job(s) (" + names + ") on " +
                     socket + " with " + std::to_string(workers) + " worker(s)\nMAINPID=" + std::to_string(::getpid()));
        control::LoopHooks hooks;
        if (systemd.watchdog_enabled()) {
          hooks.turn = std::chrono::duration_cast<std::chrono::milliseconds>(systemd.interval() / 4);
        }
        hooks.each_turn = [&systemd] { systemd.keepalive(); };
        hooks.at_stop = [&systemd, &table] {
          systemd.send("STOPPING=1");
          // Workers waiting out an unreachable object store give their samples up: the pool's
          // threads are joined next, and a store that never returns must not hang the stop.
          for (Job* j : table.jobs()) j->stop_waiting();
        };
        server.run(hooks);
      }  // workers joined: nothing writes the segments any more
      server_ptr.store(nullptr);
    }  // socket closed and unlinked; jobs destroyed after their device copies settled
    delivery.shutdown();
    stoker::log::info("stopped cleanly");
    return 0;
  } catch (const std::exception& e) {
    stoker::log::error("{}", e.what());
    return 1;
  }
}

}  // namespace stoker::app
