// One job of `jobs:` — its keys in order, the sampler's world and ranks, batching, sharing,
// errors, output type and device, cache, read-ahead and batch mixing — and the checks across
// them (normalize needs a float output, a cache a deterministic pipeline, a batch a bounded
// size). Its `source:` is read in job_source.cpp and its `pipeline:` in pipeline_steps.cpp.
#include <algorithm>
#include <cstdint>
#include <string>

#include "config/sections.hpp"
#include "objstore/object_url.hpp"

namespace stoker::config {

namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kMaxBatch = 65536;
constexpr std::uint64_t kMaxReaders = 64;  // a slot's readers are bits of one 64-bit word
constexpr std::uint64_t kMaxSlotBytes = std::uint64_t{4} << 30;

// The global world a job belongs to and the ranks this daemon serves (multi-node: one stokerd
// per node, each serving its own GPUs' global ranks; nothing is shared but config and seed).
//   world_size: W, ranks: A-B        ranks A..B (inclusive) of a world of W
//   world_size: W, node_rank: N, local_world_size: L     ranks N*L .. N*L+L-1
//   neither                          ranks 0..consumers-1 of a world of `consumers`
void parse_world(const Reader& r, const Fields& f, JobConfig& job) {
  const Value* world = f.get("world_size");
  const Value* ranks = f.get("ranks");
  const Value* node = f.get("node_rank");
  const Value* local = f.get("local_world_size");
  if (world == nullptr) {
    for (const Value* v : {ranks, node, local}) {
      if (v != nullptr) r.fail(*v, "needs world_size beside it (the global number of ranks)");
    }
    job.world_size = job.consumers;
    return;
  }
  job.world_size = static_cast<std::uint32_t>(r.integer(*world, 1, 1u << 20));
  if (ranks != nullptr && (node != nullptr || local != nullptr)) {
    r.fail(*ranks, "give either ranks: A-B or node_rank + local_world_size, not both");
  }
  std::uint64_t first = 0, last = job.world_size - 1;
  if (ranks != nullptr) {
    const std::string t = r.string(*ranks);
    const std::size_t dash = t.find('-');
    Value a{YAML::Node(t.substr(0, dash)), ranks->path, ranks->at};
    Value b{YAML::Node(dash == std::string::npos ? t : t.substr(dash + 1)), ranks->path, ranks->at};
    if (t.empty() || t.find('-', dash == std::string::npos ? 0 : dash + 1) != std::string::npos) {
      r.fail(*ranks, "expected A-B (global ranks, inclusive) or one rank, got '" + t + "'");
    }
    first = r.integer(a, 0, job.world_size - 1);
    last = r.integer(b, 0, job.world_size - 1);
    if (last < first) r.fail(*ranks, "the range " + t + " is empty (A-B needs A <= B)");
  } else if (node != nullptr || local != nullptr) {
    if (node == nullptr || local == nullptr) {
      r.fail(node ? *node : *local, "node_rank and local_world_size go together");
    }
    const std::uint64_t l = r.integer(*local, 1, 1024);
    const std::uint64_t n = r.integer(*node, 0, job.world_size - 1);
    first = n * l;
    last = first + l - 1;
    if (last >= job.world_size) {
      r.fail(*node, "node " + std::to_string(n) + " with " + std::to_string(l) + " rank(s) per node needs ranks " +
                        std::to_string(first) + ".." + std::to_string(last) + ", beyond world_size " +
                        std::to_string(job.world_size));
    }
  }
  if (last - first + 1 > 1024) r.fail(ranks ? *ranks : *world, "one daemon serves at most 1024 ranks");
  const auto served = static_cast<std::uint32_t>(last - first + 1);
  if (const Value* c = f.get("consumers"); c != nullptr && job.consumers != served) {
    r.fail(*c, "consumers: " + std::to_string(job.consumers) + " disagrees with the " + std::to_string(served) +
                   " rank(s) this daemon serves (" + std::to_string(first) + ".." + std::to_string(last) +
                   "); leave consumers out");
  }
  job.first_rank = static_cast<std::uint32_t>(first);
  job.consumers = served;
}

// shuffle: true/false, or {window_shards: N}: a shuffled order that visits a tar source's
// shards N at a time (sampler/window_order.hpp). Only a tar source has shards; a mixture's
// order is its sources' interleave, which would mix every source's windows again, so both
// are refused at the key rather than served a full shuffle the config did not ask for.
void parse_shuffle(const Reader& r, const Value& v, JobConfig& job) {
  if (v.node.IsScalar()) {
    job.shuffle = r.boolean(v);
    return;
  }
  if (!v.node.IsMap()) r.fail(v, "expected true, false or {window_shards: N}, got " + describe(v.node));
  const Fields s(r, v, {"window_shards"});
  const Value& n = s.need("window_shards");
  job.window_shards = static_cast<std::uint32_t>(r.integer(n, 1, UINT32_MAX));
  job.shuffle = true;
  if (job.mixture()) {
    r.fail(n, "not with a mixture (sources:): its order interleaves the sources, so no window of shards would "
              "hold; use shuffle: true, or one tar source");
  }
  if (job.source.type != "tar") {
    r.fail(n, "only for a source of type: tar (type: " + job.source.type + " has no shards to window)");
  }
}

// cache: {bytes: N} keeps finished samples of a deterministic pipeline in RAM, so later
// epochs skip read and decode. A random step would make a cached sample differ from what the
// pipeline gives for (seed, epoch, sample): refused, naming the step.
void parse_cache(const Reader& r, const Value& v, JobConfig& job) {
  const Fields c(r, v, {"bytes"});
  job.cache_bytes = r.bytes(c.need("bytes"), 0, std::uint64_t{1} << 50);
  // Filled while the job runs, never given back: more than the machine holds ends in bad_alloc.
  if (const std::uint64_t most = job_memory_budget() * 4; job.cache_bytes > most) {
    r.fail(c.need("bytes"), "must be at most " + std::to_string(most >> 20) + " MiB, this machine's memory, got " +
                                std::to_string(job.cache_bytes >> 20) + " MiB");
  }
  const image::PipelineSpec& p = job.pipeline;
  const char* random = p.geometry == image::Geometry::kRandomResizedCrop ? "random_resized_crop"
                       : p.flip_probability > 0                           ? "horizontal_flip"
                       : !p.augment.empty()                               ? "its colour augmentations"
                       : !p.erase_output.empty()                          ? "random_erasing"
                                                                          : nullptr;
  if (job.cache_bytes > 0 && random != nullptr) {
    r.fail(v, std::string("only for deterministic pipelines (e.g. resize + center_crop), but this pipeline has ") +
                  random + ": every epoch gives a sample different pixels, so a cached one would be wrong");
  }
}

// decoded_store: {max_side: N, path: DIR, bytes: SIZE}: every image is reduced so its longer
// side is at most max_side (part of the pipeline from epoch 0 on) and the reduced pixels are
// kept under DIR, shared by the jobs of the same source and max_side. A client-defined job may
// not name a folder stokerd writes (as quarantine).
void parse_decoded_store(const Reader& r, const Value& v, const fs::path& base_dir, JobConfig& job) {
  if (r.client_job()) {
    r.fail(v, "a client-defined job cannot use a decoded store (stokerd writes its folder); define the job in "
              "the server's config");
  }
  const Fields d(r, v, {"max_side", "path", "bytes"});
  job.store_max_side = static_cast<std::uint32_t>(r.integer(d.need("max_side"), 16, 16384));
  const Value& p = d.need("path");
  const fs::path dir = r.string(p);
  if (dir.empty()) r.fail(p, "must name a folder");
  job.store_path = resolve(dir, base_dir);
  job.store_bytes = r.bytes(d.need("bytes"), std::uint64_t{1} << 20, std::uint64_t{1} << 50);
  const std::uint32_t longest = std::max(job.pipeline.out_width, job.pipeline.out_height);
  if (job.store_max_side < longest) {
    r.fail(d.need("max_side"), "max_side " + std::to_string(job.store_max_side) + " is below the output's " +
                                   std::to_string(longest) + " px: every sample would be enlarged");
  }
  job.pipeline.store_max_side = job.store_max_side;
  job.device_pipeline.store_max_side = job.store_max_side;
}

// read_ahead: {bytes: SIZE, requests: N} (either 0: off), or false to turn it off. The
// defaults hold a few hundred typical JPEGs; requests is the most reads in flight per job.
void parse_read_ahead(const Reader& r, const Value& v, JobConfig& job) {
  if (v.node.IsScalar()) {
    if (r.boolean(v)) return;  // true: the defaults
    job.read_ahead_bytes = 0;
    job.read_ahead_requests = 0;
    return;
  }
  const Fields ra(r, v, {"bytes", "requests"});
  if (auto* b = ra.get("bytes")) {
    job.read_ahead_bytes = r.bytes(*b, 0, std::uint64_t{1} << 40);
    if (job.read_ahead_bytes > job_memory_budget()) {
      r.fail(*b, "must be at most the bound of " + budget_words() + ", got " +
                     std::to_string(job.read_ahead_bytes >> 20) + " MiB");
    }
  }
  if (auto* q = ra.get("requests")) job.read_ahead_requests = static_cast<std::uint32_t>(r.integer(*q, 0, 256));
}

// mixup: {alpha}, cutmix: {alpha} (torchvision's MixUp/CutMix, α > 0 of Beta(α, α)) and,
// with both, mix_switch_prob: the probability that a batch takes CutMix rather than MixUp.
double parse_mix_alpha(const Reader& r, const Value& v) {
  const Fields m(r, v, {"alpha"});
  const Value& a = m.need("alpha");
  const double alpha = r.number(a);
  if (!(alpha > 0 && alpha <= 1000)) r.fail(a, "must be within (0, 1000] (the alpha of Beta(alpha, alpha))");
  return alpha;
}

void parse_mix(const Reader& r, const Fields& f, JobConfig& job) {
  const Value* mixup = f.get("mixup");
  const Value* cutmix = f.get("cutmix");
  if (mixup != nullptr) job.mix.mixup_alpha = parse_mix_alpha(r, *mixup);
  if (cutmix != nullptr) job.mix.cutmix_alpha = parse_mix_alpha(r, *cutmix);
  if (const Value* v = f.get("mix_switch_prob")) {
    if (mixup == nullptr || cutmix == nullptr) {
      r.fail(*v, "only with both mixup and cutmix (it is the probability that a batch takes CutMix instead of MixUp)");
    }
    job.mix.switch_prob = r.number(*v);
    if (!(job.mix.switch_prob >= 0 && job.mix.switch_prob <= 1)) r.fail(*v, "must be within [0, 1]");
  }
}

// output: {dtype, layout} (left out: uint8 NCHW, the cheapest thing to produce and to move),
// and device_normalize, which moves normalize from the workers' output to the GPU's. Checked
// against the pipeline, so read after it.
void parse_output(const Reader& r, const Fields& f, const Value& j, JobConfig& job) {
  Mark dtype_at = j.at;  // where a dtype complaint points: the dtype, else output, else the job
  if (auto* out = f.get("output")) {
    const Fields o(r, *out, {"dtype", "layout"});
    dtype_at = out->at;
    if (auto* v = o.get("dtype")) {
      dtype_at = v->at;
      const std::string d = r.choice(*v, {"uint8", "float16", "float32"});
      job.pipeline.dtype = d == "uint8"     ? proto::DType::kUInt8
                           : d == "float16" ? proto::DType::kFloat16
                                            : proto::DType::kFloat32;
    }
    if (auto* v = o.get("layout")) {
      job.pipeline.layout = r.choice(*v, {"NCHW", "NHWC"}) == "NCHW" ? proto::Layout::kNCHW : proto::Layout::kNHWC;
    }
  }
  if (job.pipeline.normalize && job.pipeline.dtype == proto::DType::kUInt8) {
    r.fail(dtype_at, join(j.path, "output.dtype"),
           "normalize needs float16 or float32 output (uint8 cannot hold normalized values); "
           "keep uint8 and normalize on the GPU, or set output.dtype");
  }
  if (auto* v = f.get("device_normalize"); v != nullptr && r.boolean(*v)) {
    // The workers write uint8 (a quarter of float32's bytes over PCIe) and the device copy is
    // normalized on the GPU into the float output the pipeline asks for.
    if (job.pipeline.dtype == proto::DType::kUInt8) {
      r.fail(v->at, join(j.path, "device_normalize"),
             "needs a float16 or float32 output.dtype (the type the GPU writes)");
    }
    if (!job.pipeline.erase_output.empty()) {
      r.fail(v->at, join(j.path, "device_normalize"),
             "random_erasing after normalize erases the normalized output, which the GPU writes here; put "
             "random_erasing before normalize (values in pixels 0..255) or leave device_normalize out");
    }
    job.device_normalize = true;
    job.device_pipeline = job.pipeline;
    job.pipeline.dtype = proto::DType::kUInt8;
    job.pipeline.normalize = false;
  }
}

}  // namespace

JobConfig parse_job(const Reader& r, const std::string& name, Mark name_at, const Value& j,
                    const fs::path& base_dir) {
  const bool name_ok = !name.empty() && name.size() <= 48 &&
                       std::all_of(name.begin(), name.end(), [](char c) {
                         return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                                c == '_' || c == '.' || c == '-';
                       });
  if (!name_ok) {
    r.fail(name_at, j.path, "job names are 1..48 characters of A-Z a-z 0-9 _ . -");
  }
  const Fields f(r, j, {"source", "sources", "epoch_size", "labels", "allow_missing_classes", "batch_size", "shuffle", "seed", "augment_seed", "drop_last", "sampler_drop_last", "pad_shards",
                        "consumers", "world_size",
                        "ranks", "node_rank", "local_world_size", "readers", "prefetch", "lease_timeout_s", "cache",
                        "weight", "workers", "on_error", "quarantine", "device", "device_normalize", "pipeline", "output",
                        "mixup", "cutmix", "mix_switch_prob", "read_ahead", "decoded_store", "remote"});
  JobConfig job;
  job.name = name;
  job.definition = YAML::Dump(j.node) + "\n# relative to " + base_dir.string();
  job.mark = name_at;

  if (f.get("sources") == nullptr) parse_source(r, f.need("source"), base_dir, job.source);
  parse_sources(r, f, base_dir, job);  // a mixture, or a refusal of its keys beside `source:`

  job.batch_size = static_cast<std::uint32_t>(r.integer(f.need("batch_size"), 1, kMaxBatch));
  if (auto* v = f.get("shuffle")) parse_shuffle(r, *v, job);
  if (auto* v = f.get("seed")) job.seed = r.integer(*v, 0, UINT64_MAX);
  if (auto* v = f.get("augment_seed")) job.augment_seed = r.integer(*v, 0, UINT64_MAX);
  if (auto* v = f.get("drop_last")) job.drop_last = r.boolean(*v);
  // Two drop_lasts, as PyTorch has them: DataLoader's (the last short batch, `drop_last`) and
  // DistributedSampler's (`sampler_drop_last`, default: the same value, which is what a
  // `drop_last: true` meant before they were two); `pad_shards: false` is the validation
  // split, every sample exactly once.
  job.sampler_drop_last = job.drop_last;
  if (auto* v = f.get("sampler_drop_last")) job.sampler_drop_last = r.boolean(*v);
  if (auto* v = f.get("pad_shards")) {
    job.pad_shards = r.boolean(*v);
    if (!job.pad_shards && job.sampler_drop_last) {
      r.fail(*v, "pad_shards: false gives every rank its share of every sample (uneven by at most one), "
                 "sampler_drop_last: true cuts the epoch to a multiple of the world: choose one "
                 "(set sampler_drop_last: false, or drop pad_shards)");
    }
  }
  if (auto* v = f.get("consumers")) job.consumers = static_cast<std::uint32_t>(r.integer(*v, 1, 1024));
  parse_world(r, f, job);
  if (auto* v = f.get("readers")) job.readers = static_cast<std::uint32_t>(r.integer(*v, 1, kMaxReaders));
  if (auto* v = f.get("prefetch")) job.prefetch = static_cast<std::uint32_t>(r.integer(*v, 1, 64));
  if (auto* v = f.get("lease_timeout_s")) {
    job.lease_timeout_s = r.number(*v);
    if (!(job.lease_timeout_s > 0 && job.lease_timeout_s <= 86400)) r.fail(*v, "must be within (0, 86400] seconds");
  }
  if (auto* v = f.get("weight")) {
    job.weight = r.number(*v);
    if (!(job.weight > 0 && job.weight <= 1000)) r.fail(*v, "must be within (0, 1000]");
  }
  if (auto* v = f.get("workers")) job.max_workers = static_cast<std::uint32_t>(r.integer(*v, 1, 1024));
  if (auto* v = f.get("on_error")) {
    const std::string e = r.choice(*v, {"skip", "substitute", "fail"});
    job.on_error = e == "skip" ? OnError::kSkip : e == "substitute" ? OnError::kSubstitute : OnError::kFail;
  }
  if (auto* v = f.get("quarantine")) {
    if (r.client_job()) {
      // A client must not choose a file stokerd writes (as root, that is any file): a client's
      // job always has the server's path, <state_dir>/<job>-<dataset hash>.quarantine.
      r.fail(*v, "a client-defined job cannot choose its quarantine file (stokerd writes it, under its "
                 "server.state_dir); leave the key out");
    }
    const fs::path q = r.string(*v);
    if (q.empty()) r.fail(*v, "must not be empty (leave the key out for the default)");
    job.quarantine = resolve(q, base_dir);
  }
  if (auto* v = f.get("device")) job.device_output = r.boolean(*v);

  parse_pipeline(r, f.need("pipeline"), job.pipeline);

  parse_output(r, f, j, job);
  if (auto* v = f.get("cache")) parse_cache(r, *v, job);
  if (auto* v = f.get("read_ahead")) parse_read_ahead(r, *v, job);
  if (auto* v = f.get("decoded_store")) parse_decoded_store(r, *v, base_dir, job);
  parse_mix(r, f, job);
  if (auto* v = f.get("remote")) {
    // A source in object storage is read by each worker itself, with the worker's own
    // credentials (remote/worker_fetch.hpp): the items name URLs, and stokerd's credentials
    // are never sent.
    parse_remote(r, *v, j, base_dir, job);
  }
  const std::uint64_t slot_bytes = job.pipeline.sample_bytes() * job.batch_size;
  if (slot_bytes > kMaxSlotBytes) {
    r.fail(name_at, j.path, "one batch would take " + std::to_string(slot_bytes >> 20) +
                                " MiB (limit 4096); reduce batch_size or the output size");
  }
  // The rings are made when the job starts: every rank served holds `prefetch` batches.
  const std::uint64_t ring_bytes = slot_bytes * job.prefetch * job.consumers;
  if (ring_bytes > job_memory_budget()) {
    const Value* prefetch = f.get("prefetch");
    const Value& at = prefetch != nullptr ? *prefetch : f.need("batch_size");
    r.fail(at, "the rings would take " + std::to_string(ring_bytes >> 20) + " MiB (" + std::to_string(job.consumers) +
                   " rank(s) x prefetch " + std::to_string(job.prefetch) + " x batch_size " +
                   std::to_string(job.batch_size) + " x " + std::to_string(job.pipeline.sample_bytes()) +
                   " bytes a sample), more than the bound of " + budget_words() +
                   "; reduce prefetch, batch_size, the output size or the ranks served");
  }
  return job;
}

}  // namespace stoker::config
