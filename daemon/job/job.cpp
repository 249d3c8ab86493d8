#include "job/job.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log/log.hpp"
#include "core/check.hpp"
#include "job/batch_mix.hpp"
#include "job/finish.hpp"
#include "sampler/sampler.hpp"
#include "sampler/window_order.hpp"

namespace stoker::job {

using proto::SlotState;

namespace {

proto::BatchGeometry geometry_of(const config::JobConfig& cfg) {
  proto::BatchGeometry g{};
  g.batch_size = cfg.batch_size;
  g.channels = 3;
  g.height = cfg.pipeline.out_height;
  g.width = cfg.pipeline.out_width;
  g.dtype = cfg.pipeline.dtype;
  g.layout = cfg.pipeline.layout;
  g.image_bytes = cfg.pipeline.sample_bytes();
  return g;
}

// A mixing job's labels are soft rows of num_classes (float16 for float16 images, float32
// otherwise); everyone else's stay int64 class indices.
std::uint32_t label_dtype_of(const config::JobConfig& cfg, const source::Dataset& dataset) {
  if (!cfg.mix.enabled()) return 0;
  if (dataset.classes.empty()) {
    throw std::runtime_error("job " + cfg.name + ": mixup/cutmix need class labels, and the source has no classes");
  }
  return static_cast<std::uint32_t>(soft_label_dtype(cfg.pipeline.dtype));
}

// The sampler's view of a mixture job: each source's ids, size and weight (the dataset's parts
// are in the config's order of `sources:`), and epoch_size (default: the sources' sum).
std::optional<sampler::Mixture> mixture_of(const config::JobConfig& cfg, const source::Dataset& dataset) {
  if (!cfg.mixture()) return std::nullopt;
  STOKER_CHECK(dataset.parts.size() == cfg.sources.size(), "job {}: {} dataset parts for {} sources", cfg.name,
               dataset.parts.size(), cfg.sources.size());
  sampler::Mixture m;
  for (std::size_t s = 0; s < cfg.sources.size(); ++s) {
    m.sources.push_back({dataset.parts[s].offset, dataset.parts[s].size, cfg.sources[s].weight});
  }
  m.epoch_size = cfg.epoch_size != 0 ? cfg.epoch_size : dataset.samples.size();
  const auto quota = sampler::mixture_quotas(m);
  for (std::size_t s = 0; s < cfg.sources.size(); ++s) {
    stoker::log::info("job {}: source {}: {} samples, weight {}, {} of each epoch's {} ({:.3g} of its own epochs)",
                      cfg.name, dataset.parts[s].name, dataset.parts[s].size, cfg.sources[s].weight, quota[s],
                      m.epoch_size, static_cast<double>(quota[s]) / dataset.parts[s].size);
  }
  return m;
}

// Where each shard's run of sample ids begins, for a windowed order (empty otherwise). Runs,
// not shard indices: a shard without samples has no run, so it takes no place in a window.
std::vector<std::uint32_t> shard_starts_of(const config::JobConfig& cfg, const source::Dataset& dataset) {
  std::vector<std::uint32_t> starts;
  if (cfg.window_shards == 0) return starts;
  for (std::size_t i = 0; i < dataset.samples.size(); ++i) {
    if (i == 0 || dataset.samples[i].shard != dataset.samples[i - 1].shard) {
      starts.push_back(static_cast<std::uint32_t>(i));
    }
  }
  stoker::log::info("job {}: shuffle in windows of {} of its {} shard(s)", cfg.name, cfg.window_shards, starts.size());
  return starts;
}

}  // namespace

// What one ring needs from its job (ring.hpp): the job's streams, stop flag, work items,
// finishing steps, device copies and wake-ups, for ring `ring_`.
class Job::RingLink final : public RingHooks {
 public:
  RingLink(Job& job, std::uint32_t ring) : job_(job), ring_(ring) {}

  std::vector<std::uint32_t> epoch_ids(std::uint64_t epoch, std::uint64_t consumed) override {
    return job_.epoch_ids(ring_, epoch, consumed);
  }
  bool stopped() const override { return job_.failed_.load(); }
  void planned(std::uint32_t slot, std::uint32_t position, std::uint32_t generation, std::uint32_t id,
               std::vector<WorkItem>& out) override {
    out.push_back(WorkItem{&job_, ring_, slot, position, generation});
    job_.want_read(out.back(), job_.mixture_ ? sampler::untag(*job_.mixture_, id) : id);
  }
  std::uint32_t settle(const SlotBatch& batch) override { return job_.settle_bad_samples(ring_, batch); }
  bool mixes() const override { return job_.label_dtype_ != 0; }
  void mix(const SlotBatch& batch) override { job_.mix_batch(ring_, batch); }
  bool copy_to_device(std::uint32_t slot, std::uint32_t count, std::uint64_t epoch, std::uint64_t batch_index,
                      delivery::DeviceRing& to) override {
    return job_.copy_to_device(ring_, slot, count, epoch, batch_index, to);
  }
  void published() override {
    {
      base::MutexLock lock(job_.stats_mu_);
      job_.stats_.batches_published++;
    }
    job_.notify_ready_();
  }
  void notify() override { job_.notify_ready_(); }
  void epoch_failed(std::uint64_t epoch, std::size_t done, const std::vector<std::string>& first) override {
    job_.epoch_failed(ring_, epoch, done, first);
  }
  void epoch_done(std::uint64_t epoch) override { job_.epoch_done(epoch); }

 private:
  Job& job_;
  const std::uint32_t ring_;
};

Job::Job(std::size_t index, const config::JobConfig& cfg, source::Dataset dataset,
         const std::string& segment_name, unsigned shm_mode, std::uint64_t daemon_generation,
         WorkQueue& queue, std::function<void()> notify_ready)
    : index_(index),
      cfg_(cfg),
      dataset_(std::move(dataset)),
      mixture_(mixture_of(cfg, dataset_)),
      shard_starts_(shard_starts_of(cfg, dataset_)),
      source_served_(std::make_unique<std::atomic<std::uint64_t>[]>(dataset_.parts.size())),
      source_quarantined_(std::make_unique<std::atomic<std::uint64_t>[]>(dataset_.parts.size())),
      label_dtype_(label_dtype_of(cfg, dataset_)),
      label_width_(label_dtype_ == 0 ? 1 : static_cast<std::uint32_t>(dataset_.classes.size())),
      plan_(proto::plan_segment(geometry_of(cfg), cfg.consumers, cfg.prefetch,
                                proto::label_row_bytes(label_dtype_, label_width_))),
      queue_(queue),
      notify_ready_(std::move(notify_ready)) {
  (void)shm_mode;  // access to a sealed memfd is the control socket's (see ShmSegment)
  proto::SegmentHeader h{};
  h.daemon_generation = daemon_generation;
  h.geometry = geometry_of(cfg);
  h.samples_per_epoch = samples_per_epoch();
  h.num_classes = static_cast<std::uint32_t>(dataset_.classes.size());
  h.label_dtype = label_dtype_;
  h.label_width = label_width_;
  proto::copy_cstr(h.job_name, cfg.name.c_str());
  segment_ = std::make_unique<Segment>(segment_name, plan_, cfg.consumers, cfg.prefetch, h);

  quarantine_ = std::make_unique<Quarantine>(cfg.quarantine);
  quarantined_ = std::make_unique<std::atomic<std::uint8_t>[]>(dataset_.samples.size());
  missing_named_ = std::make_unique<std::atomic<std::uint8_t>[]>(dataset_.samples.size());
  std::size_t skipped = 0, changed = 0;
  if (quarantine_->size() > 0) {
    for (std::size_t i = 0; i < dataset_.samples.size(); ++i) {
      const std::string path = dataset_.path(i);
      if (!quarantine_->contains(path)) continue;
      if (quarantine_->still_bad(path)) {
        quarantined_[i] = 1;
        ++skipped;
        if (mixture_) source_quarantined_[sampler::source_of(*mixture_, static_cast<std::uint32_t>(i))]++;
      } else {
        ++changed;  // replaced since it was found bad: decoded again
      }
    }
    stoker::log::info(
        "job {}: {} file(s) skipped, listed in quarantine {}{}", cfg.name, skipped, cfg.quarantine.string(),
        changed ? "; " + std::to_string(changed) + " listed file(s) changed since and are tried again" : "");
  }
  stats_.quarantined = skipped;
  if (cfg.cache_bytes > 0) {
    cache_ = std::make_unique<SampleCache>(cfg.cache_bytes, dataset_.samples.size(), cfg.pipeline.sample_bytes());
    const std::uint64_t fit = cfg.cache_bytes / cfg.pipeline.sample_bytes();
    stoker::log::info("job {}: cache of {} MiB for finished samples: {} of {} sample(s) fit{}", cfg.name,
                      cfg.cache_bytes >> 20, std::min<std::uint64_t>(fit, dataset_.samples.size()),
                      dataset_.samples.size(),
                      fit < dataset_.samples.size() ? " (the first ones decoded are kept; nothing is evicted)" : "");
  }
  quarantined_count_ = skipped;
  if (cfg.store_max_side > 0) open_store();

  for (std::uint32_t r = 0; r < cfg.consumers; ++r) {
    RingMemory memory;
    memory.header = segment_->ring_header(r);
    for (std::uint32_t s = 0; s < cfg.prefetch; ++s) memory.slots.push_back(segment_->slot_header(r, s));
    RingConfig rc;
    rc.job_name = cfg.name;
    rc.index = r;
    rc.rank = cfg.first_rank + r;
    rc.slots = cfg.prefetch;
    rc.readers = cfg.readers;
    rc.batch_size = cfg.batch_size;
    rc.drop_last = cfg.drop_last;
    if (label_dtype_ != 0) {
      class_labels_.emplace_back(cfg.prefetch, std::vector<std::int64_t>(cfg.batch_size));
    }
    links_.push_back(std::make_unique<RingLink>(*this, r));
    rings_.push_back(std::make_unique<Ring>(std::move(rc), std::move(memory), *links_.back()));
  }
  start_reading();
}

Job::~Job() {
  prepare_stop_.store(true);
  for (std::thread& t : prepare_threads_) t.join();
}

bool Job::restore_layout() { return segment_->restore_layout(); }

std::uint64_t Job::samples_per_epoch() const {
  return mixture_ ? mixture_->epoch_size : dataset_.samples.size();
}

std::uint64_t Job::samples_per_rank(std::uint32_t rank) const {
  return sampler::samples_per_rank(samples_per_epoch(), cfg_.world_size, rank, cfg_.shards());
}

std::vector<MixtureSourceStatus> Job::mixture_status() const {
  std::vector<MixtureSourceStatus> out;
  if (!mixture_) return out;
  // The slowest rank's planning epoch: where every rank has got to at least.
  std::uint64_t epoch = UINT64_MAX;
  for (const auto& r : ring_status()) epoch = std::min(epoch, r.next_epoch);
  if (epoch == UINT64_MAX) epoch = 0;
  const auto quota = sampler::mixture_quotas(*mixture_);
  for (std::size_t s = 0; s < dataset_.parts.size(); ++s) {
    MixtureSourceStatus m;
    m.name = dataset_.parts[s].name;
    m.weight = mixture_->sources[s].weight;
    m.samples = dataset_.parts[s].size;
    m.per_epoch = quota[s];
    m.samples_served = source_served_[s].load(std::memory_order_relaxed);
    m.quarantined = source_quarantined_[s].load(std::memory_order_relaxed);
    m.source_epoch = epoch * quota[s] / m.samples;
    out.push_back(std::move(m));
  }
  return out;
}

std::uint64_t Job::batches_per_epoch(std::uint32_t rank) const {
  return sampler::batches_per_epoch(samples_per_rank(rank), cfg_.batch_size, cfg_.drop_last);
}

std::int64_t* Job::labels(std::uint32_t ring, std::uint32_t slot) {
  if (label_dtype_ != 0) return class_labels_[ring][slot].data();
  return reinterpret_cast<std::int64_t*>(segment_->label_region(ring, slot));
}

std::vector<std::uint32_t> Job::epoch_ids(std::uint32_t ring, std::uint64_t epoch, std::uint64_t consumed) const {
  // The epoch's global order (one permutation, a windowed one over a tar source's shards, or
  // a mixture's interleave of its sources' walks); the ranks' split of it is the same anyway.
  const auto n = static_cast<std::uint32_t>(dataset_.samples.size());
  std::vector<std::uint32_t> perm;
  if (mixture_) {
    perm = sampler::mixture_order(*mixture_, cfg_.shuffle, cfg_.seed, epoch, /*tag_visits=*/true);
  } else if (cfg_.window_shards > 0) {
    perm = sampler::window_permutation(shard_starts_, n, cfg_.window_shards, cfg_.seed, epoch);
  } else {
    perm = sampler::epoch_permutation(n, cfg_.shuffle, cfg_.seed, epoch);
  }
  // Each daemon computes only its own ranks' share from (position, world): nothing is
  // exchanged between nodes, so one daemon per node resumes elastically on its own.
  return sampler::rank_samples_from(perm, consumed, cfg_.world_size, cfg_.first_rank + ring, cfg_.shards());
}

void Job::start() {
  std::vector<WorkItem> items;
  for (auto& ring : rings_) ring->start(items);
  queue_.push(std::move(items));
}

void Job::record_error(std::uint64_t id, const image::SampleResult& r) {
  const std::string path = dataset_.path(id);
  const char* kind = image::to_string(r.error);
  {
    base::MutexLock lock(stats_mu_);
    stats_.errors[static_cast<int>(r.error)]++;
  }
  if (quarantined_[id].exchange(1) == 0) {
    quarantined_count_++;
    if (mixture_) source_quarantined_[sampler::source_of(*mixture_, id)].fetch_add(1, std::memory_order_relaxed);
  }
  if (quarantine_->add(path, kind, r.reason)) {
    stoker::log::warn("job {}: {}: {} ({})", cfg_.name, path, r.reason, kind);
    base::MutexLock lock(stats_mu_);
    stats_.quarantined++;
  }
  if (cfg_.on_error == config::OnError::kFail) {
    base::MutexLock lock(stats_mu_);
    if (!failure_) {
      failure_ = path + ": " + r.reason;
      stoker::log::error("job {} stopped (on_error: fail): {}", cfg_.name, *failure_);
    }
    failed_.store(true);
  }
}

void Job::run(const WorkItem& item, image::SampleProcessor& processor,
              std::vector<std::uint8_t>& file_buffer) {
  Ring& ring = *rings_[item.ring];
  const Ring::Sample sample_of = ring.begin_sample(item);
  // A mixture's stream carries each visit's source epoch in the id (mixture_order's
  // tag_visits): the sample is the untagged id, its augmentation draw keyed by the tagged one,
  // so a sample visited twice in an epoch gets two draws. One source: the same number.
  const std::uint32_t draw_id = sample_of.id;
  const std::uint32_t id = mixture_ ? sampler::untag(*mixture_, draw_id) : draw_id;
  const std::uint64_t epoch = sample_of.epoch;

  image::SampleResult result;
  bool made = false;
  if (quarantined_[id].load() != 0) {
    // Known bad (this run or an earlier one's quarantine file): not read again, and dropped
    // from (or substituted in) its batch like a newly found bad file, without counting again.
    result.error = image::SampleErrorKind::kCorrupt;
  } else if (!failed_.load()) {
    made = true;
    std::uint8_t* out = sample_out(item);
    if (cache_ && cache_->get(id, out)) {
      // Finished earlier (a deterministic pipeline gives the same bytes every epoch).
    } else if (store_) {
      run_stored(item, id, epoch, processor, file_buffer, out, result);
    } else if (read_sample(item, id, epoch, file_buffer, result)) {
      result = processor.process(file_buffer, cfg_.pixel_seed(), epoch, draw_id, out);
      if (formats_.record(id, result.format)) {
        stoker::log::info("job {}: formats by content: {}", cfg_.name, formats_.summary());
      }
      if (result.ok() && cache_) cache_->put(id, out);
    }
  } else {
    result.error = image::SampleErrorKind::kIo;  // job stopped: not decoded, not counted
  }
  settle_sample(item, id, result, made);
}

std::uint8_t* Job::sample_out(const WorkItem& item) {
  return segment_->payload(item.ring, item.slot) +
         static_cast<std::uint64_t>(item.position) * cfg_.pipeline.sample_bytes();
}

void Job::put_sample(const WorkItem& item, const std::uint8_t* pixels) {
  std::uint8_t* out = sample_out(item);
  const std::uint64_t n = cfg_.pipeline.sample_bytes();
  const ShmSegment& shm = segment_->shm();
  if (!shm.write(static_cast<std::uint64_t>(out - shm.base()), pixels, n)) std::memcpy(out, pixels, n);
}

void Job::settle_sample(const WorkItem& item, std::uint32_t id, const image::SampleResult& result, bool made) {
  if (made && result.ok()) {
    labels(item.ring, item.slot)[item.position] = dataset_.samples[id].label;
    segment_->ids(item.ring, item.slot)[item.position] = id;
    if (mixture_) source_served_[sampler::source_of(*mixture_, id)].fetch_add(1, std::memory_order_relaxed);
    base::MutexLock lock(stats_mu_);
    stats_.samples_ok++;
    stats_.decode_warnings += result.warnings;
  } else if (made && result.error != image::SampleErrorKind::kIo) {
    record_error(id, result);  // the bytes failed to decode: quarantined
  }
  drop_read(item);  // not read (quarantined, cached, job stopped, remote): read-ahead frees its bytes

  std::optional<std::string> failure;
  if (!result.ok()) {
    failure = dataset_.path(id) + ": " + (result.reason.empty() ? std::string("quarantined earlier") : result.reason);
  }
  std::vector<WorkItem> more;
  rings_[item.ring]->sample_done(item, result.ok(), failure ? &*failure : nullptr, more);
  queue_.push(std::move(more));
}

void Job::mix_batch(std::uint32_t ring, const SlotBatch& batch) {
  const proto::BatchGeometry g = geometry_of(cfg_);
  const MixDraw draw = draw_mix(cfg_.mix, cfg_.pixel_seed(), batch.epoch, batch.batch_index, cfg_.first_rank + ring,
                                g.height, g.width);
  MixBatch b;
  b.images = segment_->payload(ring, batch.slot);
  b.count = batch.count;
  b.geometry = g;
  b.labels = labels(ring, batch.slot);
  b.soft = segment_->label_region(ring, batch.slot);
  b.num_classes = label_width_;
  b.label_dtype = static_cast<proto::DType>(label_dtype_);
  apply_mix(draw, b);
}

std::uint32_t Job::settle_bad_samples(std::uint32_t ring, const SlotBatch& batch) {
  BatchView view;
  view.images = segment_->payload(ring, batch.slot);
  view.sample_bytes = cfg_.pipeline.sample_bytes();
  view.labels = labels(ring, batch.slot);
  view.ids = segment_->ids(ring, batch.slot);
  view.sample_ids = batch.sample_ids;
  view.ok = batch.ok;
  view.count = batch.count;
  const Settled settled = job::settle_bad_samples(view, cfg_.on_error);  // finish.hpp
  if (settled.substituted > 0) {
    base::MutexLock lock(stats_mu_);
    stats_.substituted += settled.substituted;
  }
  return settled.count;
}

void Job::epoch_failed(std::uint32_t ring, std::uint64_t epoch, std::size_t done,
                       const std::vector<std::string>& first_failures) {
  std::string first;
  for (const auto& f : first_failures) first += (first.empty() ? "" : "; ") + f;
  base::MutexLock lock(stats_mu_);
  if (failure_) return;
  failure_ = "every sample of rank " + std::to_string(cfg_.first_rank + ring) + " in epoch " +
             std::to_string(epoch) + " failed (" + std::to_string(done) + " of them); first: " + first;
  stoker::log::error("job {} stopped: {}", cfg_.name, *failure_);
  failed_.store(true);
}

std::optional<std::string> Job::failure() const {
  base::MutexLock lock(stats_mu_);
  return failure_;
}

JobStats Job::stats() const {
  base::MutexLock lock(stats_mu_);
  JobStats st = stats_;
  st.bytes_read = bytes_read_.load(std::memory_order_relaxed);
  return st;
}

}  // namespace stoker::job
