// Telemetry's sampling: the per-job rates, the trainer waits, and the once-a-second turn of
// the operations (the document itself is rendered in metrics_control.cpp).
#include "control/telemetry.hpp"

#include <algorithm>
#include <vector>

#include "log/log.hpp"
#include "control/metrics_http.hpp"
#include "control/sessions.hpp"
#include "job/job.hpp"
#include "sched/worker_pool.hpp"
#include "jobs/job_table.hpp"

namespace stoker::control {

using job::Job;

namespace {

std::string wait_key(const Telemetry::ConsumerKey& k) {
  return "wait/" + std::to_string(std::get<0>(k)) + "/" + std::to_string(std::get<1>(k)) + "/" +
         std::to_string(std::get<2>(k));
}

}  // namespace

Telemetry::Telemetry(const jobs::JobTable& jobs, const Sessions& sessions)
    : jobs_(jobs), sessions_(sessions), started_(std::chrono::steady_clock::now()), last_sample_(started_) {}

void Telemetry::note_release_wait(const Session& s, std::optional<std::uint64_t> wait_ns) {
  ConsumerWait& w = waits_[{s.job->index(), s.rank, s.reader}];
  if (w.releases == 0) w.since = s.connected_at;
  ++w.releases;
  if (!wait_ns) return;
  // Untrusted: a trainer cannot have waited longer than it has been connected.
  const double age = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.connected_at).count();
  w.wait_s += std::min(static_cast<double>(*wait_ns) * 1e-9, std::max(age, 0.0));
  ++w.reported;
}

double Telemetry::rate(const Job& j) const {
  const auto now = std::chrono::steady_clock::now();
  auto t0 = started_;
  std::uint64_t before = 0;
  for (const auto& [t, snap] : rate_history_) {  // the oldest snapshot that has the job
    if (auto f = snap.find(j.index()); f != snap.end()) {
      t0 = t;
      before = f->second;
      break;
    }
  }
  const double dt = std::chrono::duration<double>(now - t0).count();
  const std::uint64_t ok = j.stats().samples_ok;
  return dt > 0 && ok >= before ? static_cast<double>(ok - before) / dt : 0.0;
}

const Telemetry::ConsumerWait* Telemetry::wait(const ConsumerKey& k) const {
  const auto w = waits_.find(k);
  return w != waits_.end() ? &w->second : nullptr;
}

double Telemetry::wait_fraction(const ConsumerKey& k) const {
  const auto w = waits_.find(k);
  if (w == waits_.end()) return 0.0;
  return std::clamp(op_window_.rate_to_now(wait_key(k), w->second.since, w->second.wait_s, std::chrono::steady_clock::now()),
                    0.0, 1.0);
}

void Telemetry::sample() {
  // One snapshot of samples_ok per job a second, kept for kRateWindow: the reported rate is
  // over that window, so it means something between two status calls and decays to 0 over the
  // window after the last consumer leaves instead of dropping at once.
  constexpr auto kRateWindow = std::chrono::seconds(10);
  const auto now = std::chrono::steady_clock::now();
  if (now - last_sample_ < std::chrono::seconds(1)) return;
  last_sample_ = now;
  rate_history_.emplace_back(now, std::map<std::size_t, std::uint64_t>());
  for (Job* j : jobs_.jobs()) rate_history_.back().second[j->index()] = j->stats().samples_ok;
  while (rate_history_.size() > 2 && now - rate_history_[1].first >= kRateWindow) rate_history_.pop_front();
  const auto& [t_old, ok_old] = rate_history_.front();
  const double dt = std::chrono::duration<double>(now - t_old).count();
  rates_.clear();
  for (const auto& [index, ok] : rate_history_.back().second) {
    // A job added inside the window is measured from its first snapshot.
    std::uint64_t before = 0;
    double span = dt;
    if (auto it = ok_old.find(index); it != ok_old.end()) {
      before = it->second;
    } else {
      for (const auto& [t, snap] : rate_history_) {
        if (auto f = snap.find(index); f != snap.end()) {
          before = f->second;
          span = std::chrono::duration<double>(now - t).count();
          break;
        }
      }
    }
    rates_[index] = span > 0 ? static_cast<double>(ok - before) / span : 0.0;
  }
  run_operations(now);
}

void Telemetry::run_operations(std::chrono::steady_clock::time_point now) {
  // Jobs come and go (reload, drain): a removed job's consumers leave the metrics with it
  // (job indexes are never reused, so a key never names another job).
  std::vector<std::size_t> present;
  for (const Job* j : jobs_.jobs()) present.push_back(j->index());
  std::erase_if(waits_, [&](const auto& kv) {
    return std::find(present.begin(), present.end(), std::get<0>(kv.first)) == present.end();
  });
  std::map<std::string, double> totals;
  if (ops_.pool != nullptr) totals["busy"] = ops_.pool->busy_seconds();
  for (const auto& [k, w] : waits_) totals[wait_key(k)] = w.wait_s;
  op_window_.sample(now, std::move(totals));

  if (ops_.http != nullptr || !ops_.textfile_dir.empty()) {
    const std::string text = metrics_text();
    if (ops_.http != nullptr) ops_.http->publish(text);
    if (!ops_.textfile_dir.empty()) {
      const base::Status written = write_metrics_textfile(ops_.textfile_dir, text);
      const bool ok = written.ok();
      if (!ok && !textfile_failing_)
        stoker::log::warn("metrics textfile: {}; retrying every second", written.message());
      if (ok && textfile_failing_) stoker::log::info("metrics textfile: writing {} again", ops_.textfile_dir.string());
      textfile_failing_ = !ok;
    }
  }
  if (ops_.log_interval_s > 0 &&
      std::chrono::duration<double>(now - last_log_).count() >= ops_.log_interval_s) {
    // The first turn only starts the clock: a line after a full interval means something.
    if (last_log_ != std::chrono::steady_clock::time_point{}) stoker::log::info("{}", throughput_line());
    last_log_ = now;
  }
}

}  // namespace stoker::control
