#include "jobs/job_factory.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <vector>

#include "log/log.hpp"
#include "job/job.hpp"
#include "objstore/credentials.hpp"
#include "objstore/fetcher.hpp"
#include "sched/work_queue.hpp"
#include "source/mixed_dataset.hpp"
#include "stoker/proto/names.hpp"

namespace stoker::jobs {

using job::Job;
using sched::WorkQueue;
using sched::JobShare;
namespace {

// The fetcher of a source whose shards are URLs (issue #35); null when none is. Credentials,
// region and endpoint are resolved now, once per source: a half-given key pair or a missing
// profile is refused when the job loads, naming the variable or file and never a value.
std::shared_ptr<objstore::Fetcher> object_fetcher(const config::SourceConfig& src, const std::string& log_name) {
  bool any = objstore::looks_like_url(src.root.string());
  for (const auto& s : src.shards) any = any || objstore::looks_like_url(s);
  if (!any) return nullptr;
  const objstore::EnvLookup env = objstore::process_env();
  base::Result<objstore::Credentials> creds = objstore::resolve_credentials(env);
  if (!creds) throw source::SourceError("object storage credentials: " + creds.status().message());
  objstore::Fetcher::Options o;
  o.region = objstore::resolve_region(env);
  o.endpoint = objstore::resolve_endpoint(src.endpoint, o.region, env);
  o.addressing = objstore::choose_addressing(src.addressing, o.endpoint, o.region);
  o.credentials = std::move(*creds);
  // Re-read by the same chain when their file changes or a store says they expired.
  o.reload_credentials = [env] { return objstore::resolve_credentials(env); };
  if (!src.cache_path.empty()) {
    base::Result<std::shared_ptr<objstore::ObjectCache>> cache = objstore::ObjectCache::open(src.cache_path, src.cache_bytes);
    if (!cache) throw source::SourceError(cache.status().message());
    o.cache = std::move(*cache);
    stoker::log::info("{}: cache {} of at most {} bytes, {} file(s) ({} bytes) kept from before", log_name,
                      src.cache_path.string(), src.cache_bytes, o.cache->files(), o.cache->bytes());
  }
  stoker::log::info("{}: object storage at {} (region {}, {}), credentials: {}", log_name, o.endpoint, o.region,
                    o.addressing == objstore::Addressing::kVirtualHost ? "virtual-host" : "path-style",
                    o.credentials.describe());
  return std::make_shared<objstore::Fetcher>(std::move(o));
}

source::Dataset load_one(const config::JobConfig& job, const std::filesystem::path& state_dir,
                         const source::ReadAs* as) {
  if (job.source.type == "filelist" && objstore::looks_like_url(job.source.file.string())) {
    return source::read_object_file_list(job.source.file.string(), job.source.root.string(),
                                         object_fetcher(job.source, "job " + job.name));
  }
  if (job.source.type == "filelist") return source::read_file_list(job.source.file, job.source.root, as);
  if (job.source.type == "tar") {
    // The index cache sits beside the quarantine, keyed the same way.
    return source::read_tar_shards(job.source.shards, state_dir / (dataset_state_name(job) + ".tarindex"),
                                   "job " + job.name, as, object_fetcher(job.source, "job " + job.name));
  }
  if (objstore::looks_like_url(job.source.root.string())) {
    return source::scan_object_folder(job.source.root.string(), object_fetcher(job.source, "job " + job.name),
                                      "job " + job.name);
  }
  return source::scan_image_folder(job.source.root, as);
}

// A mixture: each source read as a job of its own would read it (a tar index cache of its own,
// keyed by the source), then combined; a failure names the source's entry of `sources:`, a
// class list refused by `labels: shared` names `labels`.
source::Dataset load_dataset(const config::JobConfig& job, const std::filesystem::path& state_dir,
                             const source::ReadAs* as, const std::string& config_file) {
  if (!job.mixture()) return load_one(job, state_dir, as);
  std::vector<source::Dataset> parts;
  std::vector<std::string> names;
  for (std::size_t i = 0; i < job.sources.size(); ++i) {
    const config::MixtureEntry& e = job.sources[i];
    config::JobConfig one;
    one.name = job.name + "-" + e.name;
    one.source = e.source;
    try {
      parts.push_back(load_one(one, state_dir, as));
    } catch (const source::SourceError& err) {
      throw config::ConfigError(config_file, e.source.root_mark,
                                "jobs." + job.name + ".sources[" + std::to_string(i) + "]." + e.source.root_key,
                                err.what());
    }
    names.push_back(e.name);
    if (parts.back().samples.empty()) {
      throw config::ConfigError(config_file, e.source.root_mark,
                                "jobs." + job.name + ".sources[" + std::to_string(i) + "]." + e.source.root_key,
                                "this source holds no samples");
    }
  }
  std::uint64_t total = 0;
  for (const auto& d : parts) total += d.samples.size();
  if (total > 0xffffffffull) {  // sample ids are 32-bit
    throw config::ConfigError(config_file, job.source.root_mark, "jobs." + job.name + ".sources",
                              "the sources hold " + std::to_string(total) + " samples together; at most 4294967295");
  }
  try {
    return source::combine_datasets(std::move(parts), names,
                                    job.labels == config::MixtureLabels::kShared ? source::ClassMerge::kShared
                                                                                 : source::ClassMerge::kPerSource,
                                    job.allow_missing_classes);
  } catch (const source::SourceError& err) {
    throw config::ConfigError(config_file, job.labels_mark, "jobs." + job.name + ".labels", err.what());
  }
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

}  // namespace

std::string dataset_state_name(const config::JobConfig& jc) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  std::string identity = jc.source.type + ":" + jc.source.root.lexically_normal().string() + ":" +
                         jc.source.file.lexically_normal().string();
  for (const auto& s : jc.source.shards) identity += ":" + s;  // none unless tar: old names unchanged
  if (!jc.source.endpoint.empty()) identity += "@" + jc.source.endpoint;  // one bucket name, another server
  for (const auto& m : jc.sources) {  // a mixture: every source (none for one source: unchanged)
    identity += "|" + m.name + ":" + m.source.type + ":" + m.source.root.lexically_normal().string() + ":" +
                m.source.file.lexically_normal().string();
    for (const auto& s : m.source.shards) identity += ":" + s;
  }
  for (const char c : identity) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return jc.name + "-" + hex;
}

PreparedJob prepare_job(config::JobConfig jc, const std::filesystem::path& state_dir,
                        const std::string& config_file, std::shared_ptr<const source::ReadAs> read_as) {
  PreparedJob p;
  try {
    p.dataset = load_dataset(jc, state_dir, read_as.get(), config_file);
    p.dataset.read_as = std::move(read_as);
  } catch (const source::SourceError& e) {
    throw config::ConfigError(config_file, jc.source.root_mark, "jobs." + jc.name + ".source." + jc.source.root_key,
                              e.what());
  }
  // <state_dir>/<job>-<16 hex>.quarantine: the bad samples found so far.
  if (jc.quarantine.empty()) jc.quarantine = state_dir / (dataset_state_name(jc) + ".quarantine");
  p.config = std::move(jc);
  return p;
}

std::unique_ptr<Job> make_job(PreparedJob prepared, std::size_t index, const JobContext& ctx) {
  const config::JobConfig& jc = prepared.config;
  const source::Dataset& ds = prepared.dataset;
  stoker::log::info("job {}: files by extension: {}", jc.name, extension_summary(ds));
  stoker::log::info("job {}: {} samples in {} classes from {}, batch {}, {} consumer(s), {} slots each", jc.name,
                    ds.samples.size(), ds.classes.size(),
                    jc.mixture()              ? "a mixture of " + std::to_string(jc.sources.size()) + " sources"
                    : jc.source.type == "tar" ? std::to_string(ds.shards.size()) + " tar shard(s)"
                                              : jc.source.root.string(),
                    jc.batch_size, jc.consumers, jc.prefetch);
  if (index > 0 || jc.max_workers != 0) {
    stoker::log::info("job {}: shares the {} worker(s) with weight {}, at most {} at once", jc.name, ctx.workers,
                      jc.weight, jc.max_workers != 0 ? std::min(jc.max_workers, ctx.workers) : ctx.workers);
  }
  ctx.queue->set_share(index, JobShare{jc.weight, jc.max_workers});
  const config::JobConfig cfg = jc;  // Job copies it; the dataset moves
  auto job = std::make_unique<Job>(index, cfg, std::move(prepared.dataset), proto::segment_name(ctx.socket, cfg.name),
                                   ctx.shm_mode, ctx.generation, *ctx.queue, ctx.notify);
  // A batch larger than a consumer's epoch starts fine and then serves nothing (drop_last) or
  // one short batch an epoch: said at start, with both numbers, rather than found in training.
  const std::uint64_t per_rank = job->samples_per_rank(job->first_rank());
  if (cfg.batch_size > per_rank) {
    stoker::log::warn("job {}: batch_size {} is larger than the {} samples an epoch gives each consumer{}: {}",
                      cfg.name, cfg.batch_size, per_rank,
                      cfg.consumers > 1 || job->world_size() > 1 ? " (rank's share)" : "",
                      job->batches_per_epoch(job->first_rank()) == 0
                          ? "with drop_last: true every epoch is empty and no batch is ever served"
                          : "every epoch is one short batch");
  }
  return job;
}

}  // namespace stoker::jobs
