#include "source/mixed_dataset.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace stoker::source {

Dataset combine_datasets(std::vector<Dataset> parts, const std::vector<std::string>& names, ClassMerge merge,
                         bool allow_missing) {
  Dataset out;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].samples.empty()) throw SourceError("source '" + names[i] + "' holds no samples");
    total += parts[i].samples.size();
  }
  if (total > 0xffffffffull) {
    throw SourceError("the sources hold " + std::to_string(total) + " samples together; at most 4294967295");
  }
  // Labels: a map from each part's own label to the combined one.
  std::vector<std::vector<std::int64_t>> relabel(parts.size());
  if (merge == ClassMerge::kPerSource) {
    for (std::size_t i = 0; i < parts.size(); ++i) {
      for (const auto& c : parts[i].classes) {
        relabel[i].push_back(static_cast<std::int64_t>(out.classes.size()));
        out.classes.push_back(names[i] + "/" + c);
      }
    }
  } else {
    std::set<std::string> all;
    for (const auto& p : parts) all.insert(p.classes.begin(), p.classes.end());
    out.classes.assign(all.begin(), all.end());
    std::map<std::string, std::int64_t> index;
    for (const auto& c : out.classes) index.emplace(c, static_cast<std::int64_t>(index.size()));
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const std::set<std::string> mine(parts[i].classes.begin(), parts[i].classes.end());
      if (!allow_missing) {
        for (std::size_t j = 0; j < parts.size(); ++j) {
          for (const auto& c : parts[j].classes) {
            if (mine.count(c) == 0) {
              throw SourceError("labels: shared: class '" + c + "' of source '" + names[j] + "' is missing from source '" +
                                names[i] + "' (set allow_missing_classes: true if that is meant)");
            }
          }
        }
      }
      for (const auto& c : parts[i].classes) relabel[i].push_back(index.at(c));
    }
  }
  // Whole files: one root if all share it, else absolute names (a part in object storage:
  // its URL, which names its object; DatasetPart::whole_source says which fetcher reads it).
  std::set<std::string> roots;
  for (const auto& p : parts) {
    if (p.shards.empty()) roots.insert(p.root);  // a tar source's samples are all members
  }
  const bool one_root = roots.size() <= 1;
  out.root = one_root && !roots.empty() ? *roots.begin() : std::string();
  std::size_t name_bytes = 0;
  for (const auto& p : parts) name_bytes += p.names.size() + (one_root ? 0 : (p.root.size() + 1) * p.samples.size());
  out.names.reserve(name_bytes);
  out.samples.reserve(total);
  std::string full;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    Dataset& p = parts[i];
    const auto shard_base = static_cast<std::uint32_t>(out.shards.size());
    DatasetPart part;
    part.name = names[i];
    part.offset = static_cast<std::uint32_t>(out.samples.size());
    part.size = static_cast<std::uint32_t>(p.samples.size());
    part.classes = p.classes.size();
    for (std::size_t id = 0; id < p.samples.size(); ++id) {
      const Sample& s = p.samples[id];
      const std::int64_t label =
          s.label >= 0 && static_cast<std::size_t>(s.label) < relabel[i].size() ? relabel[i][static_cast<std::size_t>(s.label)]
                                                                               : s.label;
      if (s.shard != Sample::kWholeFile) {
        out.add(p.name(id), label, shard_base + s.shard, s.offset, s.size);
      } else if (one_root || p.root.empty()) {
        out.add(p.name(id), label, Sample::kWholeFile, s.offset, s.size);
      } else {
        full.assign(p.root).append("/").append(p.name(id));
        out.add(full, label, Sample::kWholeFile, s.offset, s.size);
      }
    }
    if (!p.object_sources.empty() || !out.object_sources.empty()) {
      // Object storage in some part: every shard gets its source's entry (local: kLocalShard).
      out.shard_source.resize(out.shards.size(), Dataset::kLocalShard);
      const auto source_base = static_cast<std::uint32_t>(out.object_sources.size());
      for (std::size_t k = 0; k < p.shards.size(); ++k) {
        const bool remote = !p.shard_source.empty() && p.shard_source[k] != Dataset::kLocalShard;
        out.shard_source.push_back(remote ? source_base + p.shard_source[k] : Dataset::kLocalShard);
      }
      if (p.root_source != Dataset::kLocalShard) part.whole_source = source_base + p.root_source;
      for (auto& o : p.object_sources) {
        o.name = names[i];
        out.object_sources.push_back(std::move(o));
      }
    }
    out.shards.insert(out.shards.end(), p.shards.begin(), p.shards.end());
    out.parts.push_back(std::move(part));
    p = Dataset{};  // free each part as soon as it is copied: peak memory ~ combined + one part
  }
  settle(out);
  return out;
}

}  // namespace stoker::source
