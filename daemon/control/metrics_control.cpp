// Telemetry's rendering: the Prometheus document (rendered once a second on the control
// thread, which owns every figure in it, and handed to the HTTP thread and the textfile) and
// the periodic one-line throughput log.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "control/sessions.hpp"
#include "control/telemetry.hpp"
#include "image/sample_result.hpp"
#include "job/job.hpp"
#include "sched/worker_pool.hpp"
#include "jobs/job_table.hpp"

namespace stoker::control {

using job::Job;
using job::JobStats;
using job::ReaderStatus;
using job::RingStatus;

std::string Telemetry::throughput_line() const {
  // "throughput: train 2310 img/s wait 3%, val 0 img/s; workers 87% busy; rss 412 MiB"
  std::string line = "throughput:";
  bool first = true;
  for (const Job* job : jobs_.jobs()) {
    const std::size_t i = job->index();
    const auto rate = rates_.find(i);
    line += fmt::format("{} {} {:.0f} img/s", first ? "" : ",", job->name(), rate != rates_.end() ? rate->second : 0.0);
    first = false;
    double worst = 0;
    bool any = false;
    for (const auto& [k, w] : waits_) {
      if (std::get<0>(k) != i || w.reported == 0) continue;
      any = true;
      worst = std::max(worst, wait_fraction(k));
    }
    if (any) line += fmt::format(" wait {:.0f}%", worst * 100);
    const JobStats st = job->stats();
    std::uint64_t errors = 0;
    for (int e = 1; e < 6; ++e) errors += st.errors[e];
    if (errors != 0) line += fmt::format(" errors {}", errors);
  }
  if (ops_.pool != nullptr && ops_.pool->size() > 0) {
    line += fmt::format("; workers {:.0f}% busy", 100 * std::clamp(op_window_.rate("busy") / ops_.pool->size(), 0.0, 1.0));
  }
  line += fmt::format("; rss {} MiB", resident_memory_bytes() >> 20);
  return line;
}

std::string Telemetry::metrics_text() const {
  MetricsText m;
  const double uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  m.family("stoker_uptime_seconds", "gauge", "Seconds since stokerd started.");
  m.sample("stoker_uptime_seconds", {}, uptime);
  m.family("stoker_resident_memory_bytes", "gauge", "Resident set size of stokerd.");
  m.sample("stoker_resident_memory_bytes", {}, static_cast<double>(resident_memory_bytes()));
  m.family("stoker_clients", "gauge", "Open control connections (consumers and status readers).");
  m.sample("stoker_clients", {}, static_cast<double>(sessions_.size()));
  if (ops_.pool != nullptr) {
    const double n = ops_.pool->size();
    m.family("stoker_workers", "gauge", "Decode worker threads.");
    m.sample("stoker_workers", {}, n);
    m.family("stoker_worker_busy_seconds_total", "counter", "Seconds the workers together spent decoding.");
    m.sample("stoker_worker_busy_seconds_total", {}, ops_.pool->busy_seconds());
    m.family("stoker_worker_busy_ratio", "gauge", "Fraction of the workers' time spent decoding, last 10 s.");
    m.sample("stoker_worker_busy_ratio", {}, n > 0 ? std::clamp(op_window_.rate("busy") / n, 0.0, 1.0) : 0.0);
  }

  // Position p in `jobs` (serving and draining jobs, in the order added); job indexes differ.
  const std::vector<Job*> jobs = jobs_.jobs();
  std::map<std::size_t, const Job*> by_index;
  std::vector<JobStats> stats;
  for (const Job* j : jobs) {
    stats.push_back(j->stats());
    by_index[j->index()] = j;
  }
  auto per_job = [&](const char* name, const char* type, const char* help, auto value) {
    m.family(name, type, help);
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      m.sample(name, {{"job", jobs[i]->name()}}, static_cast<double>(value(i, stats[i])));
    }
  };
  per_job("stoker_job_samples_total", "counter", "Samples decoded and published.",
          [](std::size_t, const JobStats& s) { return s.samples_ok; });
  per_job("stoker_job_images_per_second", "gauge", "Samples per second over the last 10 s.",
          [&](std::size_t i, const JobStats&) {
            const auto r = rates_.find(jobs[i]->index());
            return r != rates_.end() ? r->second : 0.0;
          });
  per_job("stoker_job_batches_published_total", "counter", "Batches published to the rings.",
          [](std::size_t, const JobStats& s) { return s.batches_published; });
  per_job("stoker_job_bytes_read_total", "counter", "Sample bytes read from storage (cache hits excluded).",
          [](std::size_t, const JobStats& s) { return s.bytes_read; });
  per_job("stoker_job_quarantined_total", "counter", "Samples quarantined as undecodable.",
          [](std::size_t, const JobStats& s) { return s.quarantined; });
  // Object storage (issue #35): each bucket source's fetcher counters, by job and source; the
  // families appear only when some job has such a source.
  bool object_sources = false;
  for (const Job* j : jobs) object_sources = object_sources || !j->dataset().object_sources.empty();
  auto per_object_source = [&](const char* name, const char* help, auto value) {
    m.family(name, "counter", help);
    for (const Job* j : jobs) {
      for (const source::ObjectSource& os : j->dataset().object_sources) {
        m.sample(name, {{"job", j->name()}, {"source", os.name}}, static_cast<double>(value(os.fetcher->stats())));
      }
    }
  };
  if (object_sources) {
    per_object_source("stoker_source_requests_total", "Object storage requests sent (retries included).",
               [](const objstore::FetchStats& f) { return f.requests.load(); });
    per_object_source("stoker_source_bytes_total", "Object storage bytes received.",
               [](const objstore::FetchStats& f) { return f.bytes.load(); });
    per_object_source("stoker_source_retries_total", "Object storage requests retried after a transient fault.",
               [](const objstore::FetchStats& f) { return f.retries.load(); });
    per_object_source("stoker_source_cache_hits_total", "Object reads answered by the local cache.",
               [](const objstore::FetchStats& f) { return f.cache_hits.load(); });
    per_object_source("stoker_source_transient_errors_total", "Object storage requests failed after every retry.",
               [](const objstore::FetchStats& f) { return f.transient.load(); });
  }
  per_job("stoker_job_substituted_total", "counter", "Bad samples replaced by a good one of the batch.",
          [](std::size_t, const JobStats& s) { return s.substituted; });
  per_job("stoker_job_transient_read_errors_total", "counter", "Transient read failures (retried).",
          [](std::size_t, const JobStats& s) { return s.transient_read_errors; });
  per_job("stoker_job_missing_total", "counter", "Samples unreadable now (skipped this epoch).",
          [](std::size_t, const JobStats& s) { return s.missing; });
  per_job("stoker_job_failed", "gauge", "1 when the job stopped on an error.",
          [&](std::size_t i, const JobStats&) { return jobs[i]->failure() ? 1 : 0; });
  per_job("stoker_job_draining", "gauge", "1 while the job drains (reload, stokerctl drain).",
          [&](std::size_t i, const JobStats&) { return jobs[i]->draining() ? 1 : 0; });
  // Decoded store (jobs that have one): this job's hits/misses, the shared store's size.
  // (No family at all when no job has a store: /metrics stays as it was without the key.)
  const bool any_store = std::any_of(jobs.begin(), jobs.end(), [](const Job* j) { return j->store_stats().has_value(); });
  auto per_store = [&](const char* name, const char* type, const char* help, auto value) {
    if (!any_store) return;
    m.family(name, type, help);
    for (const Job* j : jobs) {
      if (auto d = j->store_stats()) m.sample(name, {{"job", j->name()}}, static_cast<double>(value(*d)));
    }
  };
  per_store("stoker_job_decoded_store_hits_total", "counter", "Samples whose reduced pixels came from the decoded store.",
            [](const job::JobStoreStats& d) { return d.hits; });
  per_store("stoker_job_decoded_store_misses_total", "counter", "Samples decoded with a decoded store configured.",
            [](const job::JobStoreStats& d) { return d.misses; });
  per_store("stoker_job_decoded_store_entries", "gauge", "Entries in the job's decoded store.",
            [](const job::JobStoreStats& d) { return d.store.entries; });
  per_store("stoker_job_decoded_store_bytes", "gauge", "Size of the job's decoded store file.",
            [](const job::JobStoreStats& d) { return d.store.bytes; });
  per_store("stoker_job_decoded_store_rebuilt_total", "counter", "Broken store entries found and decoded again.",
            [](const job::JobStoreStats& d) { return d.store.rebuilt; });
  per_store("stoker_job_decoded_store_errors_total", "counter", "I/O errors on the decoded store.",
            [](const job::JobStoreStats& d) { return d.store.errors; });
  // Remote workers (job key `remote:`): one sample per (job, worker endpoint); no family when
  // no job names workers.
  std::vector<std::vector<remote::WorkerLinkStatus>> links;
  bool any_remote = false;
  for (const Job* j : jobs) {
    links.push_back(jobs_.remote_status(j));
    any_remote = any_remote || !links.back().empty();
  }
  auto per_worker = [&](const char* name, const char* type, const char* help, auto value) {
    if (!any_remote) return;
    m.family(name, type, help);
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      for (const auto& w : links[i]) {
        m.sample(name, {{"job", jobs[i]->name()}, {"worker", w.endpoint}}, static_cast<double>(value(w)));
      }
    }
  };
  using remote::WorkerLinkStatus;
  per_worker("stoker_remote_connected", "gauge", "1 while the worker's stream is open.",
             [](const WorkerLinkStatus& w) { return w.connected ? 1 : 0; });
  per_worker("stoker_remote_in_flight", "gauge", "Items sent to the worker and not answered yet.",
             [](const WorkerLinkStatus& w) { return w.in_flight; });
  per_worker("stoker_remote_samples_total", "counter", "Samples the worker made for the job.",
             [](const WorkerLinkStatus& w) { return w.samples; });
  per_worker("stoker_remote_samples_per_second", "gauge", "Samples per second from the worker (last second).",
             [](const WorkerLinkStatus& w) { return w.samples_per_s; });
  per_worker("stoker_remote_reissued_total", "counter", "Items handed back after a failure of the worker.",
             [](const WorkerLinkStatus& w) { return w.reissued; });
  per_worker("stoker_remote_mismatches_total", "counter",
             "Results of the worker this node made again (remote.verify, a bad-file verdict) and found different.",
             [](const WorkerLinkStatus& w) { return w.mismatches; });
  per_worker("stoker_remote_hedged_total", "counter", "Items outstanding past the worker's hedge time, made here instead.",
             [](const WorkerLinkStatus& w) { return w.hedged; });
  per_worker("stoker_remote_errors_total", "counter", "Streams to the worker that failed or were refused.",
             [](const WorkerLinkStatus& w) { return w.errors; });
  per_worker("stoker_remote_bytes_received_total", "counter", "Sample bytes received from the worker.",
             [](const WorkerLinkStatus& w) { return w.bytes_received; });
  per_worker("stoker_remote_compressed_total", "counter", "Samples from the worker that arrived compressed.",
             [](const WorkerLinkStatus& w) { return w.compressed; });
  per_worker("stoker_remote_rtt_seconds", "gauge", "Mean round trip of the worker's last items.",
             [](const WorkerLinkStatus& w) { return w.rtt_s; });
  // A mixture's sources (job key `sources:`): one sample per (job, source).
  std::vector<std::vector<job::MixtureSourceStatus>> mixes;
  for (const Job* j : jobs) mixes.push_back(j->mixture_status());
  auto per_source = [&](const char* name, const char* type, const char* help, auto value) {
    m.family(name, type, help);
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      for (const auto& src : mixes[i]) {
        m.sample(name, {{"job", jobs[i]->name()}, {"source", src.name}}, static_cast<double>(value(src)));
      }
    }
  };
  per_source("stoker_source_samples_total", "counter", "Samples of a mixture's source decoded and published.",
             [](const job::MixtureSourceStatus& s) { return s.samples_served; });
  per_source("stoker_source_epoch", "gauge", "A mixture source's own epoch counter where the slowest rank plans.",
             [](const job::MixtureSourceStatus& s) { return s.source_epoch; });
  per_source("stoker_source_quarantined", "gauge", "A mixture source's samples known bad.",
             [](const job::MixtureSourceStatus& s) { return s.quarantined; });
  m.family("stoker_job_decode_errors_total", "counter", "Samples that failed, by kind.");
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    for (int k = 1; k < 6; ++k) {
      m.sample("stoker_job_decode_errors_total",
               {{"job", jobs[i]->name()}, {"kind", image::to_string(static_cast<image::SampleErrorKind>(k))}},
               static_cast<double>(stats[i].errors[k]));
    }
  }

  // Rings and consumers: one sample per (job, rank[, reader]).
  std::vector<std::vector<RingStatus>> rings;
  for (const Job* j : jobs) rings.push_back(j->ring_status());
  auto rank_labels = [&](const Job* job, std::uint32_t rank) {
    return MetricLabels{{"job", job->name()}, {"rank", std::to_string(rank)}};
  };
  m.family("stoker_ring_slots", "gauge", "Slots of a rank's ring by state.");
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    for (const RingStatus& r : rings[i]) {
      const std::pair<const char*, std::uint32_t> states[] = {
          {"free", r.free}, {"filling", r.filling}, {"ready", r.ready}, {"leased", r.leased}};
      for (const auto& [state, count] : states) {
        MetricLabels l = rank_labels(jobs[i], r.rank);
        l.emplace_back("state", state);
        m.sample("stoker_ring_slots", l, count);
      }
    }
  }
  m.family("stoker_ring_occupancy_ratio", "gauge",
           "Ready slots / all slots: near 1 the trainer is the bottleneck, near 0 the data loading is.");
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    for (const RingStatus& r : rings[i]) {
      const double slots = r.free + r.filling + r.ready + r.leased;
      m.sample("stoker_ring_occupancy_ratio", rank_labels(jobs[i], r.rank), slots > 0 ? r.ready / slots : 0.0);
    }
  }
  m.family("stoker_ring_batches_released_total", "counter", "Batches released by the rank's consumers.");
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    for (const RingStatus& r : rings[i]) {
      m.sample("stoker_ring_batches_released_total", rank_labels(jobs[i], r.rank), static_cast<double>(r.released));
    }
  }
  auto reader_labels = [&](const Job* job, std::uint32_t rank, std::uint32_t reader) {
    MetricLabels l = rank_labels(job, rank);
    l.emplace_back("reader", std::to_string(reader));
    return l;
  };
  m.family("stoker_consumer_connected", "gauge", "1 while a consumer is attached.");
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    for (const RingStatus& r : rings[i]) {
      for (const ReaderStatus& rd : r.readers) {
        m.sample("stoker_consumer_connected", reader_labels(jobs[i], r.rank, rd.reader), rd.attached ? 1 : 0);
      }
    }
  }
  m.family("stoker_consumer_wait_seconds_total", "counter",
           "Seconds the trainer was blocked waiting for a batch, as its client reported at release.");
  for (const auto& [k, w] : waits_) {
    if (by_index.count(std::get<0>(k)) == 0) continue;  // its job is gone (pruned next turn)
    m.sample("stoker_consumer_wait_seconds_total", reader_labels(by_index.at(std::get<0>(k)), std::get<1>(k), std::get<2>(k)), w.wait_s);
  }
  m.family("stoker_consumer_wait_ratio", "gauge", "Fraction of the last 10 s the trainer was waiting for data.");
  for (const auto& [k, w] : waits_) {
    if (by_index.count(std::get<0>(k)) == 0) continue;  // its job is gone (pruned next turn)
    m.sample("stoker_consumer_wait_ratio", reader_labels(by_index.at(std::get<0>(k)), std::get<1>(k), std::get<2>(k)), wait_fraction(k));
  }
  m.family("stoker_consumer_releases_total", "counter", "Batches released by the consumer.");
  for (const auto& [k, w] : waits_) {
    if (by_index.count(std::get<0>(k)) == 0) continue;
    m.sample("stoker_consumer_releases_total", reader_labels(by_index.at(std::get<0>(k)), std::get<1>(k), std::get<2>(k)),
             static_cast<double>(w.releases));
  }
  return m.str();
}

}  // namespace stoker::control
