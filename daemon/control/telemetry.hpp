// What the control thread measures and reports beside serving: images/s per job over a
// 10 s window, the trainer wait that clients report with each release (protocol 2.3), the
// workers' busy fraction, and the operations built on them once a second (the Prometheus
// document for /metrics and the node_exporter textfile, the periodic throughput log line).
//
// Threads: the control thread only (the loop samples, sessions report releases, the status
// document reads), so nothing here takes a lock; the HTTP thread only gets a finished
// document through MetricsHttpServer::publish.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "control/forward.hpp"
#include "control/metrics_text.hpp"
#include "control/settings.hpp"

namespace stoker::control {

class Telemetry {
 public:
  // Trainer wait reported with releases (protocol 2.3), per (job index, rank, reader); kept
  // across reconnects so the totals only grow (they are Prometheus counters).
  struct ConsumerWait {
    double wait_s = 0;
    std::uint64_t releases = 0;  // all releases
    std::uint64_t reported = 0;  // releases that carried a wait (2.3 clients)
    std::chrono::steady_clock::time_point since{};  // when the first reporting session connected
  };
  using ConsumerKey = std::tuple<std::size_t, std::uint32_t, std::uint32_t>;

  Telemetry(const jobs::JobTable& jobs, const Sessions& sessions);

  void set_operations(Operations ops) { ops_ = std::move(ops); }
  const Operations& operations() const { return ops_; }
  std::chrono::steady_clock::time_point started() const { return started_; }

  // A consumer released a batch, having waited `wait_ns` for it (none: a 2.0..2.2 client).
  void note_release_wait(const Session& s, std::optional<std::uint64_t> wait_ns);
  // Once a turn: at most once a second, a snapshot of every job's samples for the rates, then
  // the operations (metrics document, textfile, throughput log).
  void sample();

  // images/s of the job over the last 10 s, up to now (its samples now against the oldest
  // snapshot; in the first second, against none at the daemon's start), so that a run shorter
  // than the once-a-second sampling still reads its rate.
  double rate(const job::Job& j) const;
  // The consumer's wait figures, or null before its first release.
  const ConsumerWait* wait(const ConsumerKey& k) const;
  // Fraction of the last 10 s the consumer's trainer spent waiting for data, up to now; of the
  // time since it connected when that is shorter (so a run of under a second has one too).
  double wait_fraction(const ConsumerKey& k) const;
  // Worker-seconds spent decoding per second over the last 10 s (all workers together).
  double busy_rate() const { return op_window_.rate("busy"); }

 private:
  void run_operations(std::chrono::steady_clock::time_point now);  // once a second
  // metrics_control.cpp
  std::string metrics_text() const;
  std::string throughput_line() const;

  const jobs::JobTable& jobs_;
  const Sessions& sessions_;
  Operations ops_;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point last_sample_;
  // (time, samples_ok per job index), one a second, oldest first, spanning the rate window.
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::map<std::size_t, std::uint64_t>>> rate_history_;
  std::map<std::size_t, double> rates_;  // by job index
  std::map<ConsumerKey, ConsumerWait> waits_;
  CounterWindow op_window_{std::chrono::seconds(10)};  // keys: "busy", "wait/J/R/K"
  std::chrono::steady_clock::time_point last_log_{};
  bool textfile_failing_ = false;  // logged once per failure streak
};

}  // namespace stoker::control
