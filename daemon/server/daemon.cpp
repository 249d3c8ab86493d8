#include "server/daemon.hpp"

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

#include "config/config.hpp"
#include "device/device_delivery.hpp"
#include "server/control_server.hpp"
#include "server/instance_lock.hpp"
#include "server/job.hpp"
#include "server/sd_notify.hpp"
#include "server/worker_pool.hpp"
#include "source/dataset.hpp"
#include "stoker/proto/names.hpp"

namespace stoker::server {
namespace {

constexpr const char* kUsage =
    "usage: stokerd --config FILE [--socket PATH] [--workers N] [--log-level LEVEL]\n"
    "\n"
    "Serves the jobs of a YAML pipeline config to trainers through shared memory.\n"
    "  --config FILE      pipeline config (see configs/README.md)\n"
    "  --socket PATH      control socket; default: config server.socket, $STOKER_SOCKET,\n"
    "                     $XDG_RUNTIME_DIR/stoker/stoker.sock, /run/stoker/stoker.sock (root)\n"
    "  --workers N        decode threads (default: config server.workers, else all cores)\n"
    "  --log-level LEVEL  trace|debug|info|warn|error (default: config, else info)\n";

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
  if (rl.rlim_cur != before) spdlog::info("descriptor limit raised from {} to {}", before, rl.rlim_cur);
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

// <job>-<16 hex>: keyed by the dataset's identity (source type, root, list, shard patterns),
// so the same job name pointed at another dataset does not read this one's state.
std::string dataset_state_name(const config::JobConfig& jc) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  std::string identity = jc.source.type + ":" + jc.source.root.lexically_normal().string() + ":" +
                         jc.source.file.lexically_normal().string();
  for (const auto& s : jc.source.shards) identity += ":" + s;  // none unless tar: old names unchanged
  for (const char c : identity) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return jc.name + "-" + hex;
}

// <state_dir>/<job>-<16 hex>.quarantine: the bad samples found so far.
std::string default_quarantine_name(const config::JobConfig& jc) { return dataset_state_name(jc) + ".quarantine"; }

source::Dataset load_dataset(const config::JobConfig& job, const std::filesystem::path& state_dir) {
  if (job.source.type == "filelist") return source::read_file_list(job.source.file, job.source.root);
  if (job.source.type == "tar") {
    // The index cache sits beside the quarantine, keyed the same way.
    return source::read_tar_shards(job.source.shards, state_dir / (dataset_state_name(job) + ".tarindex"),
                                   "job " + job.name);
  }
  return source::scan_image_folder(job.source.root);
}

// "jpg 1281167, png 12, webp 3": what a scan found, one line (the decoders go by content, so
// this is what the names say, which is what a user checks against their tree).
std::string extension_summary(const source::Dataset& ds) {
  std::map<std::string, std::size_t> count;
  for (std::size_t i = 0; i < ds.samples.size(); ++i) {
    // The name's extension, as std::filesystem::path::extension() gives it (without building
    // a path per sample: 0.7 s for 1.28M samples).
    const std::string_view name = ds.name(i).substr(ds.name(i).rfind('/') + 1);
    const std::size_t dot = name.rfind('.');
    std::string ext(dot == std::string_view::npos || dot == 0 || name == ".." ? std::string_view() : name.substr(dot + 1));
    for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (ext == "jpeg") ext = "jpg";
    if (ext == "tif") ext = "tiff";
    ++count[ext.empty() ? "(none)" : ext];
  }
  std::vector<std::pair<std::string, std::size_t>> v(count.begin(), count.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (const auto& [ext, n] : v) out += (out.empty() ? "" : ", ") + ext + " " + std::to_string(n);
  return out;
}

std::uint64_t new_generation() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^
         static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

}  // namespace

bool parse_daemon_args(int argc, char** argv, DaemonOptions& out, int& exit_code) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "stokerd: %s needs a value\n%s", name, kUsage);
        return nullptr;
      }
      return argv[++i];
    };
    const char* v = nullptr;
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      exit_code = 0;
      return false;
    } else if (a == "--version") {
      std::printf("stokerd %s (protocol %u.%u, layout %u.%u)\n", STOKER_VERSION,
                  proto::kProtoMajor, proto::kProtoMinor, proto::kLayoutMajor, proto::kLayoutMinor);
      exit_code = 0;
      return false;
    } else if (a == "--config" || a == "-c") {
      if (!(v = value("--config"))) break;
      out.config_path = v;
    } else if (a == "--socket") {
      if (!(v = value("--socket"))) break;
      out.socket_path = v;
    } else if (a == "--workers") {
      if (!(v = value("--workers"))) break;
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (*end != '\0' || n < 1 || n > 1024) {
        std::fprintf(stderr, "stokerd: --workers must be 1..1024, got '%s'\n", v);
        exit_code = 2;
        return false;
      }
      out.workers = static_cast<int>(n);
    } else if (a == "--log-level") {
      if (!(v = value("--log-level"))) break;
      out.log_level = v;
    } else {
      std::fprintf(stderr, "stokerd: unknown argument '%s'\n%s", a.c_str(), kUsage);
      exit_code = 2;
      return false;
    }
  }
  if (out.config_path.empty()) {
    std::fprintf(stderr, "stokerd: --config is required\n%s", kUsage);
    exit_code = 2;
    return false;
  }
  return true;
}

int run_daemon(const DaemonOptions& options) {
  config::Config cfg;
  std::vector<source::Dataset> datasets;
  std::string socket;
  std::filesystem::path state_dir;
  try {
    cfg = config::load_config(options.config_path);
    // Logging is set up before the sources load: indexing tar shards reports progress.
    const std::string level = !options.log_level.empty() ? options.log_level : cfg.server.log_level;
    spdlog::set_level(spdlog::level::from_str(level));
    spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [stokerd] [%^%l%$] %v");
    socket = proto::resolve_socket_path(options.socket_path, cfg.server.socket);
    state_dir = !cfg.server.state_dir.empty() ? cfg.server.state_dir : std::filesystem::path(socket).parent_path();
    for (const auto& job : cfg.jobs) {
      try {
        datasets.push_back(load_dataset(job, state_dir));
      } catch (const source::SourceError& e) {
        throw config::ConfigError(cfg.file.string(), job.source.root_mark,
                                  "jobs." + job.name + ".source." + job.source.root_key, e.what());
      }
    }
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
    auto backend = device::make_exporter_backend(no_device);
    DeviceDelivery delivery(std::move(backend), no_device);
    {
      bool wanted = false;
      for (const auto& jc : cfg.jobs) wanted = wanted || jc.device_output;
      if (delivery.available()) {
        spdlog::info("device delivery: {}", delivery.describe());
      } else if (wanted) {
        spdlog::warn("device output unavailable ({}); serving host batches", no_device);
      } else {
        spdlog::info("device output unavailable ({}); serving host batches", no_device);
      }
    }

    // One lane per job, in job order (a job's index is its lane): how the jobs share the pool.
    std::vector<JobShare> shares;
    for (const auto& jc : cfg.jobs) shares.push_back(JobShare{jc.weight, jc.max_workers});
    WorkQueue queue(std::move(shares));
    std::atomic<ControlServer*> server_ptr{nullptr};
    auto notify = [&server_ptr] {
      if (ControlServer* s = server_ptr.load()) s->notify();
    };
    std::vector<std::unique_ptr<Job>> jobs;
    std::vector<Job*> job_ptrs;
    for (std::size_t i = 0; i < cfg.jobs.size(); ++i) {
      config::JobConfig jc = cfg.jobs[i];
      if (jc.quarantine.empty()) jc.quarantine = state_dir / default_quarantine_name(jc);
      const auto& ds = datasets[i];
      spdlog::info("job {}: files by extension: {}", jc.name, extension_summary(ds));
      spdlog::info("job {}: {} samples in {} classes from {}, batch {}, {} consumer(s), {} slots each",
                   jc.name, ds.samples.size(), ds.classes.size(),
                   jc.source.type == "tar" ? std::to_string(ds.shards.size()) + " tar shard(s)" : jc.source.root.string(),
                   jc.batch_size, jc.consumers, jc.prefetch);
      if (cfg.jobs.size() > 1 || jc.max_workers != 0) {
        spdlog::info("job {}: shares the {} worker(s) with weight {}, at most {} at once", jc.name, workers,
                     jc.weight, jc.max_workers != 0 ? std::min(jc.max_workers, workers) : workers);
      }
      jobs.push_back(std::make_unique<Job>(i, jc, std::move(datasets[i]),
                                           proto::segment_name(socket, jc.name),
                                           cfg.server.shm_mode, generation, queue, notify));
      job_ptrs.push_back(jobs.back().get());
    }
    {
      ControlServer::Limits limits;
      limits.handshake_timeout_s = cfg.server.handshake_timeout_s;
      limits.idle_timeout_s = cfg.server.idle_timeout_s;
      limits.max_connections = cfg.server.max_connections != 0
                                   ? cfg.server.max_connections
                                   : default_max_connections(open_files, workers, job_ptrs.size());
      spdlog::info("descriptors: limit {}, at most {} connections (server.max_connections{})", open_files,
                   limits.max_connections, cfg.server.max_connections != 0 ? "" : " derived from the limit");
      ControlServer server(socket, job_ptrs, generation, workers, delivery, limits);
      server_ptr.store(&server);
      {
        WorkerPool pool(workers, queue, job_ptrs);
        for (Job* j : job_ptrs) j->start();
        spdlog::info("stokerd ready on {} with {} worker(s)", socket, workers);
        SdNotify systemd;  // Type=notify: ready once every job is planned and the socket listens
        std::string names;
        for (Job* j : job_ptrs) names += (names.empty() ? "" : ", ") + j->name();
        systemd.send("READY=1\nSTATUS=serving " + std::to_string(job_ptrs.size()) + " job(s) (" + names + ") on " +
                     socket + " with " + std::to_string(workers) + " worker(s)\nMAINPID=" + std::to_string(::getpid()));
        server.run(&systemd);
      }  // workers joined: nothing writes the segments any more
      server_ptr.store(nullptr);
    }  // socket closed and unlinked
    delivery.shutdown();  // copies finished, segments unregistered before they are unmapped
    jobs.clear();         // segments removed
    spdlog::info("stopped cleanly");
    return 0;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}

}  // namespace stoker::server
