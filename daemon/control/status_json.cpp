// StatusReport: the JSON `stokerctl status` reads: jobs, consumers, ring occupancy, images/s,
// errors, the last reload.
#include "control/status_report.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "control/client_job_access.hpp"
#include "control/metrics_http.hpp"
#include "control/reloads.hpp"
#include "control/sessions.hpp"
#include "control/telemetry.hpp"
#include "delivery/device_delivery.hpp"
#include "image/sample_result.hpp"
#include "job/job.hpp"
#include "jobs/job_table.hpp"

namespace stoker::control {

using job::Job;
using job::JobStats;
using jobs::JobTable;

namespace {

// A consumer counts as stuck once it holds a batch this long: its lease_timeout_s, else 10 s
// (far beyond any training step that keeps up with its data).
double stuck_after(const config::JobConfig& c) { return c.lease_timeout_s > 0 ? c.lease_timeout_s : 10.0; }

}  // namespace

StatusReport::StatusReport(Identity identity, const JobTable& jobs, const Sessions& sessions,
                           const Telemetry& telemetry, const Reloads& reloads, delivery::DeviceDelivery& delivery,
                           const JobSources& sources)
    : identity_(std::move(identity)),
      jobs_(jobs),
      sessions_(sessions),
      telemetry_(telemetry),
      reloads_(reloads),
      delivery_(delivery),
      sources_(sources) {}

std::string StatusReport::json(std::uint32_t viewer_uid) const {
  // Built with a JSON library (ordered: keys in this order, which people read and scripts
  // rely on), so every string is escaped and the document is valid however many consumers.
  using Json = nlohmann::ordered_json;
  const double uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - telemetry_.started()).count();
  Json doc;
  doc["pid"] = ::getpid();
  doc["socket"] = identity_.socket_path;
  doc["generation"] = identity_.generation;
  doc["workers"] = identity_.workers;
  doc["uptime_s"] = uptime;
  doc["clients"] = sessions_.size();
  const Operations& ops = telemetry_.operations();
  doc["metrics"] = ops.http != nullptr ? Json("http://" + ops.http->address() + "/metrics") : Json(nullptr);
  doc["rss_bytes"] = resident_memory_bytes();
  // Fraction of the workers' time spent decoding over the last 10 s (null before operations start).
  doc["worker_busy_fraction"] = ops.pool != nullptr && identity_.workers > 0
                                    ? Json(std::clamp(telemetry_.busy_rate() / identity_.workers, 0.0, 1.0))
                                    : Json(nullptr);
  doc["device"] = {{"backend", delivery_.describe()},
                   {"rings_awaiting_free", delivery_.live_rings()},
                   {"rings_freed", delivery_.rings_freed()}};
  // The last reload's outcome (null before the first), so `stokerctl status` answers "did my
  // edit apply?" without the daemon's log.
  Json reload;
  reload["config"] = sources_.config_file.empty() ? Json(nullptr) : Json(sources_.config_file.string());
  reload["state"] = reloads_.state();
  if (const auto& last = reloads_.last()) {
    const std::time_t t = std::chrono::system_clock::to_time_t(last->at);
    std::tm utc{};
    ::gmtime_r(&t, &utc);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
    reload["last"] = {{"at", when},
                      {"result", last->ok ? "applied" : "refused"},
                      {"ok", last->ok},
                      {"message", last->message},
                      {"requested_by", last->requested_by}};
  } else {
    reload["last"] = nullptr;
  }
  doc["reload"] = std::move(reload);
  Json jobs = Json::array();
  for (Job* jp : jobs_.jobs()) {
    if (!client_job_access(jobs_, viewer_uid, jp).ok()) continue;  // another user's client-defined job
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
    job["samples_per_epoch"] = j.samples_per_epoch();  // a mixture's epoch_size; else `samples`
    if (j.config().mixture()) {
      job["labels"] = j.config().labels == config::MixtureLabels::kShared ? "shared" : "per_source";
      Json sources = Json::array();
      const auto mix = j.mixture_status();
      for (std::size_t s = 0; s < mix.size(); ++s) {
        const auto& m = mix[s];
        const config::SourceConfig& sc = j.config().sources[s].source;
        Json src{{"name", m.name},           {"type", sc.type},
                 {"weight", m.weight},       {"samples", m.samples},
                 {"per_epoch", m.per_epoch}, {"samples_served", m.samples_served},
                 {"source_epoch", m.source_epoch}, {"quarantined", m.quarantined}};
        if (sc.type == "tar") src["shards"] = sc.shards;
        else src["root"] = sc.root.string();
        if (!sc.file.empty()) src["file"] = sc.file.string();
        sources.push_back(std::move(src));
      }
      job["sources"] = std::move(sources);
    }
    // Object storage (issue #35): each bucket source's request counters, in its `sources`
    // entry (a mixture's by name; else the job's one source gets an entry of its own).
    for (const source::ObjectSource& os : j.dataset().object_sources) {
      const objstore::FetchStats& f = os.fetcher->stats();
      const Json counters{{"requests", f.requests.load()},
                          {"bytes", f.bytes.load()},
                          {"retries", f.retries.load()},
                          {"cache_hits", f.cache_hits.load()},
                          {"in_flight", f.in_flight.load()},
                          {"latency_ms", {{"p50", f.latency_quantile_ms(0.5)}, {"p99", f.latency_quantile_ms(0.99)}}},
                          {"errors", {{"transient", f.transient.load()},
                                      {"not_found", f.not_found.load()},
                                      {"denied", f.denied.load()},
                                      {"other", f.other_errors.load()}}}};
      if (!job.contains("sources")) {
        Json one{{"name", os.name}, {"type", j.config().source.type}};
        if (j.config().source.type == "tar") one["shards"] = j.config().source.shards;
        job["sources"] = Json::array({std::move(one)});
      }
      for (Json& entry : job["sources"]) {
        if (entry["name"] == os.name) entry.update(counters);
      }
    }
    job["shuffle"] = j.config().shuffle;
    if (j.config().window_shards > 0) job["window_shards"] = j.config().window_shards;
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
    job["images_per_s"] = telemetry_.rate(j);  // over the last 10 s, up to now
    job["samples_ok"] = st.samples_ok;
    job["batches_published"] = st.batches_published;
    job["decode_warnings"] = st.decode_warnings;
    job["substituted"] = st.substituted;
    job["quarantined"] = st.quarantined;
    job["transient_read_errors"] = st.transient_read_errors;
    // Why no batches come, when the job waits for an unreachable object store; null otherwise.
    if (std::string paused = j.paused_reason(); !paused.empty()) {
      job["paused"] = std::move(paused);
    } else {
      job["paused"] = nullptr;
    }
    job["missing"] = st.missing;
    job["read_wait_s"] = j.read_wait_s();  // workers waiting for sample bytes, all threads summed
    // Read-ahead: items whose bytes were ready when a worker took them, or it waited for
    // them, or read them itself (the readers were behind); the reads allowed in flight (grown
    // while workers wait, for a source in object storage); bytes read ahead and not taken.
    if (const auto ra = j.read_ahead_stats()) {
      job["read_ahead"] = {{"ready", ra->ready},
                           {"waited", ra->waited},
                           {"withdrawn", ra->withdrawn},
                           {"in_flight_limit", ra->in_flight_limit},
                           {"held_bytes", ra->held_bytes}};
    } else {
      job["read_ahead"] = nullptr;
    }
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
    if (auto d = j.store_stats()) {
      // entries/bytes/errors are the shared store's (every job of the same source and max_side
      // sees the same); hits/misses are this job's.
      job["decoded_store"] = {{"file", d->file},           {"max_side", j.config().store_max_side},
                              {"entries", d->store.entries}, {"bytes", d->store.bytes},
                              {"budget_bytes", d->store.budget}, {"hits", d->hits},
                              {"misses", d->misses},       {"rebuilt", d->store.rebuilt},
                              {"errors", d->store.errors},  {"refused_full", d->store.refused_full},
                              {"writes_off", d->store.writes_off},
                              {"prepare", {{"running", d->preparing}, {"done", d->prepare_done},
                                           {"stored", d->prepare_stored}, {"failed", d->prepare_failed},
                                           {"total", d->total}}}};
    }
    if (!j.store_off_reason().empty()) job["decoded_store_off"] = j.store_off_reason();
    if (j.config().remote.enabled()) {
      // remote: one entry per worker endpoint (a name resolving to several gives several).
      Json workers = Json::array();
      for (const remote::WorkerLinkStatus& w : jobs_.remote_status(&j)) {
        workers.push_back({{"address", w.address},
                           {"endpoint", w.endpoint},
                           {"connected", w.connected},
                           {"in_flight", w.in_flight},
                           {"window", w.window},
                           {"threads", w.threads},
                           {"samples", w.samples},
                           {"reissued", w.reissued},
                           {"errors", w.errors},
                           {"bytes_received", w.bytes_received},
                           {"compressed", w.compressed},
                           {"mismatches", w.mismatches},
                           {"hedged", w.hedged},
                           {"read_failures", w.read_failures},
                           {"rtt_ms", w.rtt_s * 1000},
                           {"samples_per_s", w.samples_per_s},
                           {"results", w.results_tcp ? "tcp" : "stream"},
                           {"items", w.items_tcp ? "tcp" : "stream"},
                           {"last_error", w.last_error.empty() ? Json(nullptr) : Json(w.last_error)}});
      }
      job["remote"] = std::move(workers);
      job["remote_local"] = j.config().remote.local;
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
        const Telemetry::ConsumerKey key{j.index(), rs.rank, k};
        if (const Telemetry::ConsumerWait* w = telemetry_.wait(key)) {
          wait_s += w->wait_s;
          reported += w->reported;
        }
        wait_frac = std::max(wait_frac, telemetry_.wait_fraction(key));
      }
      c["wait_s"] = wait_s;
      c["wait_fraction"] = wait_frac;
      c["wait_reports"] = reported;
      if (j.readers() > 1) {
        // Fan-out: who holds the group back. A reader `behind` by `prefetch` batches is the
        // one the others wait for.
        Json readers = Json::array();
        for (const auto& r : rs.readers) {
          const Telemetry::ConsumerKey reader_key{j.index(), rs.rank, r.reader};
          const Telemetry::ConsumerWait* reader_wait = telemetry_.wait(reader_key);
          readers.push_back({{"reader", r.reader},
                             {"connected", r.attached},
                             {"next", {{"epoch", r.next_epoch}, {"batch", r.next_batch}}},
                             {"leased", r.leased},
                             {"behind", r.behind},
                             {"oldest_lease_s", r.oldest_lease_s},
                             {"stuck", r.oldest_lease_s >= stuck_after(j.config())},
                             {"wait_s", reader_wait ? reader_wait->wait_s : 0.0},
                             {"wait_fraction", telemetry_.wait_fraction(reader_key)},
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
