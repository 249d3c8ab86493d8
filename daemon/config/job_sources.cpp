// A job's `sources:` — a weighted mixture of sources (sampler/mixture.hpp), each an entry as
// `source:` takes it plus `weight` and an optional `name`; and the mixture's `epoch_size`,
// `labels: per_source|shared` and `allow_missing_classes`. Whether the classes agree
// (labels: shared) is known only once the sources are read; job_factory refuses it then,
// naming `labels_mark`.
#include <set>
#include <string>

#include "config/sections.hpp"

namespace stoker::config {

namespace fs = std::filesystem;

namespace {

// The name a source's classes are prefixed with when none is given: its folder's, list's or
// first shard pattern's name without extension.
std::string default_name(const SourceConfig& s) {
  if (s.type == "filelist") return s.file.stem().string();
  if (s.type == "tar") return fs::path(s.shards.front()).stem().string();
  return s.root.filename().string();
}

}  // namespace

void parse_sources(const Reader& r, const Fields& f, const fs::path& base_dir, JobConfig& job) {
  const Value* list = f.get("sources");
  if (list == nullptr) {
    for (const char* k : {"epoch_size", "labels", "allow_missing_classes"}) {
      if (const Value* v = f.get(k)) r.fail(*v, "only for a mixture of sources (`sources:`)");
    }
    return;
  }
  if (const Value* one = f.get("source")) {
    r.fail(*one, "give either `source:` (one source) or `sources:` (a weighted mixture), not both");
  }
  if (!list->node.IsSequence() || list->node.size() == 0) {
    r.fail(*list, "expected a list of sources, each a mapping with `weight:` beside the keys of `source:`");
  }
  if (list->node.size() > 1024) r.fail(*list, "at most 1024 sources");
  std::set<std::string> given_names;
  for (std::size_t i = 0; i < list->node.size(); ++i) {
    const Value e = r.element(*list, i);
    MixtureEntry m;
    m.mark = e.at;
    parse_source(r, e, base_dir, m.source, /*mixture_entry=*/true);
    const Fields ef(r, e, {"type", "root", "list", "file", "shards", "weight", "name"});
    m.weight = r.number(ef.need("weight"));
    if (!(m.weight > 0 && m.weight <= 1e6)) r.fail(ef.need("weight"), "must be within (0, 1000000]");
    if (const Value* n = ef.get("name")) {
      m.name = r.string(*n);
      if (m.name.empty() || m.name.find('/') != std::string::npos) r.fail(*n, "must be non-empty, without '/'");
      if (!given_names.insert(m.name).second) r.fail(*n, "'" + m.name + "' names an earlier source too");
    }
    job.sources.push_back(std::move(m));
  }
  // Unnamed sources take their default name, made unique with _<index> where two would meet.
  std::set<std::string> taken = given_names;
  for (std::size_t i = 0; i < job.sources.size(); ++i) {
    MixtureEntry& m = job.sources[i];
    if (!m.name.empty()) continue;
    std::string n = default_name(m.source);
    if (n.empty()) n = "source";
    if (taken.count(n) != 0) n += "_" + std::to_string(i);
    taken.insert(n);
    m.name = n;
  }
  job.source = SourceConfig{};
  job.source.type = "mixture";
  job.source.root_mark = list->at;
  job.source.root_key = "sources";
  job.labels_mark = list->at;
  if (const Value* v = f.get("epoch_size")) {
    job.epoch_size = r.integer(*v, 1, 0xffffffffu);
    const std::uint64_t most = job_memory_budget() / kBytesPerEpochPosition;
    if (job.epoch_size > most) {
      r.fail(*v, "must be at most " + std::to_string(most) + " on this machine, got " + std::to_string(job.epoch_size) +
                     " (an epoch's order takes " + std::to_string(kBytesPerEpochPosition) +
                     " bytes a position; the bound is " + budget_words() + ")");
    }
  }
  if (const Value* v = f.get("labels")) {
    job.labels = r.choice(*v, {"per_source", "shared"}) == "shared" ? MixtureLabels::kShared : MixtureLabels::kPerSource;
    job.labels_mark = v->at;
  }
  if (const Value* v = f.get("allow_missing_classes")) {
    job.allow_missing_classes = r.boolean(*v);
    if (job.labels != MixtureLabels::kShared) r.fail(*v, "only with labels: shared");
  }
}

}  // namespace stoker::config
