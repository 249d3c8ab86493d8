// `stokerctl status` reads this JSON: jobs, consumers, ring occupancy, images/s, errors.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "image/sample_result.hpp"
#include "delivery/device_delivery.hpp"
#include "control/control_server.hpp"
#include "job/job.hpp"
#include "jobs/job_table.hpp"
#include "control/metrics_http.hpp"

namespace stoker::control {

using delivery::DeviceDelivery;
using delivery::DeviceRing;
using delivery::PeerProcess;
using job::Job;
using job::AttachResult;
using job::JobStats;
using job::ReaderStatus;
using job::RingStatus;
using job::WorkerPool;
using jobs::JobLoader;
using jobs::JobTable;
using jobs::LoadResult;
namespace {

// A consumer counts as stuck once it holds a batch this long: its lease_timeout_s, else 10 s
// (far beyond any training step that keeps up with its data).
double stuck_after(const config::JobConfig& c) { return c.lease_timeout_s > 0 ? c.lease_timeout_s : 10.0; }

}  // namespace

void ControlServer::sample_rates() {
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
  run_operations(now);  // metrics document, textfile, throughput log (metrics_control.cpp)
}

std::string ControlServer::status_json() const {
  // Built with a JSON library (ordered: keys in this order, which people read and scripts
  // rely on), so every string is escaped and the document is valid however many consumers.
  using Json = nlohmann::ordered_json;
  const double uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  Json doc;
  doc["pid"] = ::getpid();
  doc["socket"] = socket_path_;
  doc["generation"] = daemon_generation_;
  doc["workers"] = workers_;
  doc["uptime_s"] = uptime;
  doc["clients"] = sessions_.size();
  doc["metrics"] = ops_.http != nullptr ? Json("http://" + ops_.http->address() + "/metrics") : Json(nullptr);
  doc["rss_bytes"] = resident_memory_bytes();
  // Fraction of the workers' time spent decoding over the last 10 s (null before operations start).
  doc["worker_busy_fraction"] = ops_.pool != nullptr && workers_ > 0
                                    ? Json(std::clamp(op_window_.rate("busy") / workers_, 0.0, 1.0))
                                    : Json(nullptr);
  doc["device"] = {{"backend", delivery_.describe()},
                   {"rings_awaiting_free", delivery_.live_rings()},
                   {"rings_freed", delivery_.rings_freed()}};
  // The last reload's outcome (null before the first), so `stokerctl status` answers "did my
  // edit apply?" without the daemon's log.
  Json reload;
  reload["config"] = sources_.config_file.empty() ? Json(nullptr) : Json(sources_.config_file.string());
  reload["state"] = reload_queued_ ? "loading, one more queued" : reload_running_ ? "loading" : "idle";
  if (last_reload_) {
    const std::time_t t = std::chrono::system_clock::to_time_t(last_reload_->at);
    std::tm utc{};
    ::gmtime_r(&t, &utc);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
    reload["last"] = {{"at", when},
                      {"result", last_reload_->ok ? "applied" : "refused"},
                      {"ok", last_reload_->ok},
                      {"message", last_reload_->message},
                      {"requested_by", last_reload_->requested_by}};
  } else {
    reload["last"] = nullptr;
  }
  doc["reload"] = std::move(reload);
  Json jobs = Json::array();
  for (Job* jp : jobs_.jobs()) {
    const Job& j = *jp;
    const JobTable::Entry* entry = jobs_.entry(jp);
    const JobStats st = j.stats();
    Json job;
    job["name"] = j.name();
    job["state"] = j.draining() ? "draining" : "serving";
    if (j.draining() && entry != nullptr) job["drain_reason"] = entry->drain_reason;
    job["defined_by_client"] = entry != nullptr && entry->defined_by_client;
    job["samples"] = j.dataset().samples.size();
    job["classes"] = j.dataset().classes.size();
    job["class_names"] = j.dataset().classes;
    job["source"] = j.config().source.type;
    job["root"] = j.config().source.root.string();
    if (!j.config().source.file.empty()) job["file"] = j.config().source.file.string();
    job["shuffle"] = j.config().shuffle;
    job["seed"] = j.config().seed;
    job["augment_seed"] = j.config().pixel_seed();
    job["drop_last"] = j.config().drop_last;
    job["batch_size"] = j.config().batch_size;
    job["sampler_drop_last"] = j.config().sampler_drop_last;
    job["pad_shards"] = j.config().pad_shards;
    // Rank first_rank's; with pad_shards: false each consumer's own are in its entry.
    job["batches_per_epoch"] = j.batches_per_epoch(j.first_rank());
    job["world_size"] = j.world_size();
    job["ranks"] = {j.first_rank(), j.first_rank() + j.consumers() - 1};
    job["readers"] = j.readers();
    job["weight"] = j.config().weight;  // share of the worker pool while other jobs are busy
    // Most workers running the job's items at once; null: no cap (any of the pool's).
    job["workers"] = j.config().max_workers != 0 ? Json(j.config().max_workers) : Json(nullptr);
    const auto rate = rates_.find(j.index());
    job["images_per_s"] = rate != rates_.end() ? rate->second : 0.0;  // over the last 10 s
    job["samples_ok"] = st.samples_ok;
    job["batches_published"] = st.batches_published;
    job["decode_warnings"] = st.decode_warnings;
    job["substituted"] = st.substituted;
    job["quarantined"] = st.quarantined;
    job["transient_read_errors"] = st.transient_read_errors;
    job["missing"] = st.missing;
    job["read_wait_s"] = j.read_wait_s();  // workers waiting for sample bytes, all threads summed
    job["bytes_read"] = st.bytes_read;
    // What preview (and people) need to turn float output back into pixels.
    job["mix"] = {{"mixup_alpha", j.config().mix.mixup_alpha},
                  {"cutmix_alpha", j.config().mix.cutmix_alpha},
                  {"switch_prob", j.config().mix.switch_prob}};
    // The job as defined, as YAML (config-file jobs and client-defined ones alike): pipeline,
    // mixing and every other key, which the fields above only summarize.
    job["definition"] = j.config().definition;
    job["output"] = {{"dtype", j.pipeline().dtype == proto::DType::kUInt8 ? "uint8"
                               : j.pipeline().dtype == proto::DType::kFloat16 ? "float16" : "float32"},
                     {"layout", j.pipeline().layout == proto::Layout::kNHWC ? "NHWC" : "NCHW"},
                     {"normalize", j.pipeline().normalize},
                     {"mean", j.pipeline().mean},
                     {"std", j.pipeline().stddev}};
    Json errors = Json::object();
    for (int k = 1; k < 6; ++k) errors[image::to_string(static_cast<image::SampleErrorKind>(k))] = st.errors[k];
    job["errors"] = std::move(errors);
    // Samples by format, by content, each counted the first time it is read (format_counts.hpp).
    Json formats = Json::object();
    const auto fc = j.formats().counts();
    for (std::size_t k = 1; k <= fc.size(); ++k) {  // "unknown" (0) last
      formats[image::to_string(static_cast<image::ImageFormat>(k % fc.size()))] = fc[k % fc.size()];
    }
    job["formats"] = std::move(formats);
    job["failure"] = j.failure() ? Json(*j.failure()) : Json(nullptr);
    if (auto c = j.cache_stats()) {
      job["cache"] = {{"budget_bytes", c->budget_bytes}, {"used_bytes", c->used_bytes}, {"entries", c->entries},
                      {"hits", c->hits}, {"misses", c->misses}};
    }
    Json consumers = Json::array();
    for (const auto& rs : j.ring_status()) {
      Json c;
      c["rank"] = rs.rank;
      c["connected"] = rs.attached;
      c["samples_per_epoch"] = j.samples_per_rank(rs.rank);  // what this rank really gets
      c["batches_per_epoch"] = j.batches_per_epoch(rs.rank);
      c["slots"] = {{"free", rs.free}, {"filling", rs.filling}, {"ready", rs.ready}, {"leased", rs.leased}};
      c["next"] = {{"epoch", rs.next_epoch}, {"batch", rs.next_batch}};
      c["published"] = rs.published;
      c["released"] = rs.released;
      c["device"] = rs.device_uuid.empty() ? Json(nullptr) : Json(rs.device_uuid);
      c["oldest_lease_s"] = rs.oldest_lease_s;
      c["stuck"] = rs.oldest_lease_s >= stuck_after(j.config());
      // Trainer wait reported by the client with each release (protocol 2.3): seconds blocked
      // in next() in all, and the fraction of the last 10 s (the rank's slowest reader).
      double wait_s = 0, wait_frac = 0;
      std::uint64_t reported = 0;
      for (std::uint32_t k = 0; k < j.readers(); ++k) {
        const ConsumerKey key{j.index(), rs.rank, k};
        if (auto w = waits_.find(key); w != waits_.end()) {
          wait_s += w->second.wait_s;
          reported += w->second.reported;
        }
        wait_frac = std::max(wait_frac, wait_fraction(key));
      }
      c["wait_s"] = wait_s;
      c["wait_fraction"] = wait_frac;
      c["wait_reports"] = reported;
      if (j.readers() > 1) {
        // Fan-out: who holds the group back. A reader `behind` by `prefetch` batches is the
        // one the others wait for.
        Json readers = Json::array();
        for (const auto& r : rs.readers) {
          readers.push_back({{"reader", r.reader},
                             {"connected", r.attached},
                             {"next", {{"epoch", r.next_epoch}, {"batch", r.next_batch}}},
                             {"leased", r.leased},
                             {"behind", r.behind},
                             {"oldest_lease_s", r.oldest_lease_s},
                             {"stuck", r.oldest_lease_s >= stuck_after(j.config())},
                             {"wait_s", waits_.count({j.index(), rs.rank, r.reader}) ? waits_.at({j.index(), rs.rank, r.reader}).wait_s : 0.0},
                             {"wait_fraction", wait_fraction({j.index(), rs.rank, r.reader})},
                             {"device", r.device_uuid.empty() ? Json(nullptr) : Json(r.device_uuid)}});
        }
        c["readers"] = std::move(readers);
      }
      consumers.push_back(std::move(c));
    }
    job["consumers"] = std::move(consumers);
    jobs.push_back(std::move(job));
  }
  doc["jobs"] = std::move(jobs);
  // Invalid UTF-8 in a path (a file name from a scraped dataset) is replaced, not fatal.
  return doc.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace stoker::control
