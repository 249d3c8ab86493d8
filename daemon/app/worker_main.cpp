#include "app/worker_main.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#ifdef STOKER_WITH_REMOTE
#include "log/log.hpp"
#include "config/config.hpp"
#include "control/metrics_http.hpp"
#include "control/metrics_text.hpp"
#include "objstore/credentials.hpp"
#include "remote/protocol.hpp"
#include "remote/worker_fetch.hpp"
#include "remote/worker_server.hpp"
#endif

namespace stoker::app {

bool wants_worker(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--worker") == 0) return true;
  }
  return false;
}

#ifndef STOKER_WITH_REMOTE
int run_worker(int, char**) {
  std::fprintf(stderr, "stokerd: --worker: this stokerd was built without remote workers (gRPC was not found "
                       "when it was built; scripts/setup.sh installs it)\n");
  return 2;
}
#else

namespace {

namespace fs = std::filesystem;

struct WorkerOptions {
  std::string listen;
  std::vector<std::string> allow_roots;
  std::vector<std::string> allow_objects, allow_endpoints;
  std::string token_file;
  std::string tls_cert, tls_key, tls_ca;
  unsigned threads = 0;
  double open_timeout_s = 10;
  unsigned max_streams = 64;
  unsigned results_port = 0;
  std::string metrics;
  std::string log_level = "info";
  std::string fault;  // --inject-fault KIND:N (tests)
};

int usage(const std::string& why) {
  std::fprintf(stderr, "stokerd --worker: %s\nRun 'stokerd --worker --help' for the options.\n", why.c_str());
  return 2;
}

// The worker's reads from object storage (issue #35: workers fetch with their own credentials),
// by endpoint, as stokerd's stoker_source_* families are by job and source. Absent until an
// endpoint is used.
std::string object_metrics(const remote::WorkerObjects& objects) {
  struct Row {
    std::string endpoint;
    double requests, bytes, retries, transient, not_found, denied, other, in_flight, p50, p99;
  };
  std::vector<Row> rows;
  objects.each_endpoint([&rows](const std::string& endpoint, const objstore::FetchStats& f) {
    rows.push_back({endpoint, static_cast<double>(f.requests.load()), static_cast<double>(f.bytes.load()),
                    static_cast<double>(f.retries.load()), static_cast<double>(f.transient.load()),
                    static_cast<double>(f.not_found.load()), static_cast<double>(f.denied.load()),
                    static_cast<double>(f.other_errors.load()), static_cast<double>(f.in_flight.load()),
                    f.latency_quantile_ms(0.5), f.latency_quantile_ms(0.99)});
  });
  if (rows.empty()) return {};
  control::MetricsText m;
  auto per_endpoint = [&](const char* name, const char* type, const char* help, double Row::*field) {
    m.family(name, type, help);
    for (const Row& r : rows) m.sample(name, {{"endpoint", r.endpoint}}, r.*field);
  };
  per_endpoint("stoker_remote_worker_object_requests_total", "counter",
               "Object storage requests this worker sent (retries included).", &Row::requests);
  per_endpoint("stoker_remote_worker_object_bytes_total", "counter", "Object storage bytes this worker received.",
               &Row::bytes);
  per_endpoint("stoker_remote_worker_object_retries_total", "counter",
               "Object storage requests retried after a transient fault.", &Row::retries);
  m.family("stoker_remote_worker_object_errors_total", "counter",
           "Object reads that failed, by class: transient (after every retry), not_found, denied, other.");
  for (const Row& r : rows) {
    for (const auto& [kind, v] : {std::pair{"transient", r.transient}, std::pair{"not_found", r.not_found},
                                  std::pair{"denied", r.denied}, std::pair{"other", r.other}}) {
      m.sample("stoker_remote_worker_object_errors_total", {{"endpoint", r.endpoint}, {"class", kind}}, v);
    }
  }
  per_endpoint("stoker_remote_worker_object_in_flight", "gauge", "Object storage requests in flight now.",
               &Row::in_flight);
  per_endpoint("stoker_remote_worker_object_latency_p50_ms", "gauge",
               "Median answer time of object storage requests (upper bound of its power-of-two bucket).", &Row::p50);
  per_endpoint("stoker_remote_worker_object_latency_p99_ms", "gauge",
               "99th percentile answer time of object storage requests (bucket upper bound).", &Row::p99);
  return m.str();
}

std::string metrics_text(const remote::WorkerStats& s, unsigned threads, double busy_ratio) {
  std::string t;
  auto add = [&t](const char* name, const char* type, const char* help, double v) {
    t += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
         std::to_string(v) + "\n";
  };
  add("stoker_remote_worker_items_total", "counter", "Samples made for GPU nodes.", static_cast<double>(s.items));
  add("stoker_remote_worker_errors_total", "counter", "Samples that failed (unreadable or undecodable) and streams ended in error.",
      static_cast<double>(s.errors));
  add("stoker_remote_worker_refused_total", "counter", "Streams refused (token, version, job, --allow-root, --max-streams, --open-timeout).",
      static_cast<double>(s.refused));
  add("stoker_remote_worker_open_timeouts_total", "counter",
      "Streams cancelled for sending no Open within --open-timeout (counted in refused too).",
      static_cast<double>(s.open_timeouts));
  add("stoker_remote_worker_stalls_total", "counter",
      "Times a stream was parked because its GPU node did not read its results (no decode thread waits for it).",
      static_cast<double>(s.stalls));
  add("stoker_remote_worker_bytes_sent_total", "counter", "Sample bytes sent (after compression).",
      static_cast<double>(s.bytes_sent));
  add("stoker_remote_worker_streams", "gauge", "GPU-node streams open now.", s.streams);
  add("stoker_remote_worker_threads", "gauge", "Decode threads.", threads);
  add("stoker_remote_worker_busy_ratio", "gauge", "Fraction of the decode threads' time spent making samples (last second).",
      busy_ratio);
  return t;
}

}  // namespace

int run_worker(int argc, char** argv) {
  WorkerOptions o;
  CLI::App app("Decodes and augments samples for GPU nodes' stokerd over gRPC (remote workers).", "stokerd --worker");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  bool worker = false;
  app.add_flag("--worker", worker, "run as a remote worker (this mode)");
  app.add_option("--listen", o.listen, "HOST:PORT to listen on (required; 0.0.0.0:PORT for every interface)")
      ->option_text("HOST:PORT");
  app.add_option("--allow-root", o.allow_roots, "a folder jobs may read (required; repeat for more)")
      ->option_text("DIR")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--allow-objects", o.allow_objects,
                 "an s3:// or https:// URL prefix jobs may read with this worker's credentials (repeat for more;\n"
                 "none: jobs in object storage are refused)")
      ->option_text("URL")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--allow-endpoint", o.allow_endpoints,
                 "an S3 endpoint a job's endpoint: may name (repeat for more); a job without one uses\n"
                 "AWS_ENDPOINT_URL, else AWS's")
      ->option_text("URL")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--token-file", o.token_file, "file holding the shared token GPU nodes must present")
      ->option_text("FILE");
  app.add_option("--tls-cert", o.tls_cert, "this worker's certificate (PEM); with --tls-key: TLS")->option_text("FILE");
  app.add_option("--tls-key", o.tls_key, "this worker's private key (PEM)")->option_text("FILE");
  app.add_option("--tls-ca", o.tls_ca, "CA that GPU nodes' client certificates must be signed by (mutual TLS)")
      ->option_text("FILE");
  app.add_option("--threads", o.threads, "decode threads (default: all online cores)")
      ->check(CLI::Range(1u, 1024u))
      ->option_text("N");
  app.add_option("--max-streams", o.max_streams,
                 "streams served at once (more are refused, RESOURCE_EXHAUSTED; default 64); a waiting stream holds no thread")
      ->check(CLI::Range(1u, 4096u))
      ->option_text("N");
  app.add_option("--open-timeout", o.open_timeout_s,
                 "seconds a new stream may take to send its Open before it is cancelled (default 10)")
      ->check(CLI::Range(0.1, 3600.0))
      ->option_text("SECONDS");
  app.add_option("--results-port", o.results_port,
                 "port on the --listen host where plaintext GPU nodes connect for their results (default 0: any free "
                 "one, named to each node in its OpenReply)")
      ->check(CLI::Range(0u, 65535u))
      ->option_text("PORT");
  app.add_option("--metrics", o.metrics, "serve Prometheus /metrics on HOST:PORT")->option_text("HOST:PORT");
  // Tests of the GPU node's handling of a broken worker: hidden (no group), never for production.
  app.add_option("--inject-fault", o.fault, "")->group("");
  app.add_option("--log-level", o.log_level, "trace|debug|info|warn|error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->option_text("LEVEL");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    return usage(e.what());
  }
  spdlog::set_level(spdlog::level::from_str(o.log_level));
  if (o.listen.empty()) return usage("--listen HOST:PORT is required");
  if (o.allow_roots.empty()) {
    return usage("--allow-root DIR is required (the folders jobs may read; a job whose sources lie elsewhere is refused)");
  }
  remote::WorkerSettings settings;
  for (const std::string& r : o.allow_roots) {
    std::error_code ec;
    const fs::path c = fs::canonical(r, ec);
    if (ec || !fs::is_directory(c)) return usage("--allow-root '" + r + "': not a folder (" + (ec ? ec.message() : "a file") + ")");
    settings.allow_roots.push_back(c);
  }
  // Opened once, now: items are opened below these descriptors (remote/worker_session.hpp).
  if (base::Status s = remote::open_allow_roots(settings); !s) return usage(s.message());
  if (!o.token_file.empty()) {
    auto t = remote::read_secret_file(o.token_file, "--token-file");
    if (!t) return usage(t.status().message());
    std::string token = *t;
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
    if (token.empty()) return usage("--token-file '" + o.token_file + "' is empty");
    settings.token = token;
  } else {
    stoker::log::warn("worker: no --token-file: any GPU node that reaches {} may use this worker", o.listen);
  }
  remote::TlsFiles tls;
  if (o.tls_cert.empty() != o.tls_key.empty()) return usage("--tls-cert and --tls-key go together");
  if (!o.tls_ca.empty() && o.tls_cert.empty()) return usage("--tls-ca needs --tls-cert and --tls-key");
  for (auto [path, out, what] : {std::tuple{&o.tls_cert, &tls.cert, "--tls-cert"}, std::tuple{&o.tls_key, &tls.key, "--tls-key"},
                                 std::tuple{&o.tls_ca, &tls.ca, "--tls-ca"}}) {
    if (path->empty()) continue;
    auto pem = remote::read_secret_file(*path, what);
    if (!pem) return usage(pem.status().message());
    *out = *pem;
  }
  remote::FaultPlan fault;
  if (!o.fault.empty()) {
    const std::size_t colon = o.fault.find(':');
    const std::string kind = o.fault.substr(0, colon);
    fault.kind = kind == "wrong-size"        ? remote::Fault::kWrongSize
                 : kind == "unknown-id"      ? remote::Fault::kUnknownId
                 : kind == "corrupt-frame"   ? remote::Fault::kCorruptFrame
                 : kind == "oversize-frame"  ? remote::Fault::kOversizeFrame
                 : kind == "unbound-results" ? remote::Fault::kUnboundResults
                 : kind == "stall-frame"     ? remote::Fault::kStallFrame
                 : kind == "miscount-frame"  ? remote::Fault::kMiscountFrame
                 : kind == "flip-pixels"     ? remote::Fault::kFlipPixels
                 : kind == "slow-results"    ? remote::Fault::kSlowResults
                                             : remote::Fault::kNone;
    try {
      fault.every = colon == std::string::npos ? 1 : std::stoull(o.fault.substr(colon + 1));
    } catch (const std::exception&) {
      fault.kind = remote::Fault::kNone;
    }
    if (fault.kind == remote::Fault::kNone || fault.every == 0) {
      return usage(
          "--inject-fault: expected "
          "wrong-size|unknown-id|corrupt-frame|oversize-frame|unbound-results|stall-frame|miscount-frame|flip-pixels[:"
          "N] or slow-results:KIB_PER_S, "
          "got '" +
          o.fault + "'");
    }
    if (fault.kind == remote::Fault::kSlowResults) {
      stoker::log::warn("worker: --inject-fault {}: results connections paced at {} KiB/s on purpose (tests only)",
                        kind, fault.every);
    } else {
      stoker::log::warn("worker: --inject-fault {}: every {}th result is spoiled on purpose (tests only)", kind,
                        fault.every);
    }
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  settings.threads = o.threads > 0 ? o.threads : cores;
  settings.max_streams = o.max_streams;
  settings.results_port = static_cast<std::uint16_t>(o.results_port);
  settings.open_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(o.open_timeout_s * 1000));
  const unsigned threads = settings.threads;
  // Object storage (issue #35): read with this worker's own credentials and endpoint, from its
  // environment or AWS files; a GPU node never sends any. Fetches in flight at once: each
  // stream fetches up to 8 + 4 x threads items ahead (worker_stream.hpp).
  if (!o.allow_objects.empty()) {
    for (const std::string& prefix : o.allow_objects) {
      if (!objstore::looks_like_url(prefix)) return usage("--allow-objects '" + prefix + "': expected an s3:// or https:// URL");
    }
    for (std::string e : o.allow_endpoints) {
      while (e.ends_with('/')) e.pop_back();
      if (!e.starts_with("http://") && !e.starts_with("https://")) {
        return usage("--allow-endpoint '" + e + "': expected an http:// or https:// URL");
      }
      settings.allow_endpoints.push_back(e);
    }
    settings.allow_objects = o.allow_objects;
    settings.objects = std::make_shared<remote::WorkerObjects>(objstore::process_env(), std::min(64u, 8 + 4 * threads));
  }

  // SIGTERM/SIGINT end the worker; blocked before any thread starts, so every thread inherits it.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::unique_ptr<control::MetricsHttpServer> metrics;
  std::unique_ptr<remote::WorkerServer> server;
  try {
    if (!o.metrics.empty()) {
      auto a = config::parse_metrics_address(o.metrics);
      if (!a) return usage("--metrics: " + a.status().message());
      metrics = std::make_unique<control::MetricsHttpServer>(a->host, a->port);
    }
    server = std::make_unique<remote::WorkerServer>(settings, o.listen, tls, fault);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stokerd --worker: %s\n", e.what());
    return 1;
  }
  if (settings.objects) {
    std::string prefixes;
    for (const std::string& p : settings.allow_objects) prefixes += (prefixes.empty() ? "" : ", ") + p;
    stoker::log::info("worker: object storage below {}: credentials {}, default endpoint {}", prefixes,
                      settings.objects->credentials(), settings.objects->endpoint_for(""));
  }
  std::string roots;
  for (const fs::path& r : settings.allow_roots) roots += (roots.empty() ? "" : ", ") + r.string();
  stoker::log::info(
      "worker: listening on {} (port {}; results connections on port {}), {} threads, protocol {}.{}, reads below "
      "{}{}{}",
      o.listen, server->port(), server->results_port(), threads, remote::kWorkerMajor, remote::kWorkerMinor, roots,
      tls.enabled() ? ", TLS" : "", metrics ? ", metrics on " + metrics->address() : "");
  // Tests and launch scripts read the bound port from this line (--listen HOST:0).
  std::printf("stokerd worker listening on port %d\n", server->port());
  std::fflush(stdout);

  std::uint64_t last_busy = 0;
  auto last = std::chrono::steady_clock::now();
  for (;;) {
    timespec wait{1, 0};
    const int sig = sigtimedwait(&stop_signals, nullptr, &wait);
    if (sig == SIGTERM || sig == SIGINT) {
      stoker::log::info("worker: signal {}: stopping", sig);
      break;
    }
    if (metrics) {
      const remote::WorkerStats s = server->stats();
      const auto now = std::chrono::steady_clock::now();
      const double dt = std::chrono::duration<double>(now - last).count();
      const double busy = dt > 0 ? static_cast<double>(s.busy_ns - last_busy) * 1e-9 / (dt * threads) : 0;
      last = now;
      last_busy = s.busy_ns;
      metrics->publish(metrics_text(s, threads, busy) + (settings.objects ? object_metrics(*settings.objects) : ""));
    }
  }
  server->shutdown();
  const remote::WorkerStats s = server->stats();
  const std::string objects = settings.objects ? settings.objects->summary() : std::string();
  stoker::log::info("worker: stopped after {} samples ({} failed), {} streams refused{}{}", s.items, s.errors,
                    s.refused, objects.empty() ? "" : "; object storage: ", objects);
  return 0;
}

#endif

}  // namespace stoker::app
