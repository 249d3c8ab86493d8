#include "job/job.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "core/check.hpp"
#include "job/batch_mix.hpp"
#include "job/job_state.hpp"
#include "sampler/sampler.hpp"

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

}  // namespace

Job::Job(std::size_t index, const config::JobConfig& cfg, source::Dataset dataset,
         const std::string& segment_name, unsigned shm_mode, std::uint64_t daemon_generation,
         WorkQueue& queue, std::function<void()> notify_ready)
    : index_(index),
      cfg_(cfg),
      dataset_(std::move(dataset)),
      label_dtype_(label_dtype_of(cfg, dataset_)),
      label_width_(label_dtype_ == 0 ? 1 : static_cast<std::uint32_t>(dataset_.classes.size())),
      plan_(proto::plan_segment(geometry_of(cfg), cfg.consumers, cfg.prefetch,
                                proto::label_row_bytes(label_dtype_, label_width_))),
      queue_(queue),
      notify_ready_(std::move(notify_ready)) {
  (void)shm_mode;  // access to a sealed memfd is the control socket's (see ShmSegment)
  segment_ = std::make_unique<ShmSegment>(segment_name, plan_.segment_size);

  auto* h = reinterpret_cast<proto::SegmentHeader*>(segment_->base());
  h->magic = proto::kSegmentMagic;
  h->layout_major = proto::kLayoutMajor;
  h->layout_minor = proto::kLayoutMinor;
  h->segment_size = plan_.segment_size;
  h->daemon_generation = daemon_generation;
  h->ring_count = cfg.consumers;
  h->slots_per_ring = cfg.prefetch;
  h->ring_table_offset = plan_.ring_table_offset;
  h->slot_stride = plan_.slot_stride;
  h->payload_offset = plan_.payload_offset;
  h->labels_offset = plan_.labels_offset;
  h->ids_offset = plan_.ids_offset;
  h->geometry = geometry_of(cfg);
  h->samples_per_epoch = dataset_.samples.size();
  h->num_classes = static_cast<std::uint32_t>(dataset_.classes.size());
  h->label_dtype = label_dtype_;
  h->label_width = label_width_;
  proto::copy_cstr(h->job_name, cfg.name.c_str());
  header_copy_ = *h;  // what the header must say for the life of the segment

  quarantine_ = std::make_unique<Quarantine>(cfg.quarantine);
  quarantined_ = std::make_unique<std::atomic<std::uint8_t>[]>(dataset_.samples.size());
  std::size_t skipped = 0, changed = 0;
  if (quarantine_->size() > 0) {
    for (std::size_t i = 0; i < dataset_.samples.size(); ++i) {
      const std::string path = dataset_.path(i);
      if (!quarantine_->contains(path)) continue;
      if (quarantine_->still_bad(path)) {
        quarantined_[i] = 1;
        ++skipped;
      } else {
        ++changed;  // replaced since it was found bad: decoded again
      }
    }
    spdlog::info("job {}: {} file(s) skipped, listed in quarantine {}{}", cfg.name, skipped,
                 cfg.quarantine.string(),
                 changed ? "; " + std::to_string(changed) + " listed file(s) changed since and are tried again" : "");
  }
  stats_.quarantined = skipped;
  if (cfg.cache_bytes > 0) {
    cache_ = std::make_unique<SampleCache>(cfg.cache_bytes, dataset_.samples.size(), cfg.pipeline.sample_bytes());
    const std::uint64_t fit = cfg.cache_bytes / cfg.pipeline.sample_bytes();
    spdlog::info("job {}: cache of {} MiB for finished samples: {} of {} sample(s) fit{}", cfg.name,
                 cfg.cache_bytes >> 20, std::min<std::uint64_t>(fit, dataset_.samples.size()), dataset_.samples.size(),
                 fit < dataset_.samples.size() ? " (the first ones decoded are kept; nothing is evicted)" : "");
  }
  quarantined_count_ = skipped;

  for (std::uint32_t r = 0; r < cfg.consumers; ++r) {
    auto ring = std::make_unique<Ring>();
    ring->rank = r;
    ring->slots.resize(cfg.prefetch);
    ring->readers.resize(cfg.readers);
    for (auto& s : ring->slots) {
      s.ids.resize(cfg.batch_size);
      s.ok.resize(cfg.batch_size);
      if (label_dtype_ != 0) s.class_labels.resize(cfg.batch_size);
      s.leased_at.resize(cfg.readers);
    }
    auto* rh = ring_header(r);
    rh->rank = r;
    rh->slot_count = cfg.prefetch;
    rh->first_slot_offset =
        plan_.first_slot_offset + static_cast<std::uint64_t>(r) * cfg.prefetch * plan_.slot_stride;
    rings_.push_back(std::move(ring));
  }
  start_reading();
}

Job::~Job() = default;

bool Job::restore_layout() {
  // Only the daemon writes the segment's layout; a process of the same user can still open
  // the memfd through /proc and scribble on it. Consumers check the layout at attach and
  // refuse a wrong one, so put it back before each attach: other jobs are unaffected and the
  // job recovers without a restart.
  auto* h = reinterpret_cast<proto::SegmentHeader*>(segment_->base());
  bool repaired = std::memcmp(h, &header_copy_, sizeof header_copy_) != 0;
  if (repaired) std::memcpy(h, &header_copy_, sizeof header_copy_);
  for (std::uint32_t r = 0; r < cfg_.consumers; ++r) {
    auto* rh = ring_header(r);
    const std::uint64_t first =
        plan_.first_slot_offset + static_cast<std::uint64_t>(r) * cfg_.prefetch * plan_.slot_stride;
    if (rh->rank != r || rh->slot_count != cfg_.prefetch || rh->first_slot_offset != first) {
      rh->rank = r;
      rh->slot_count = cfg_.prefetch;
      rh->first_slot_offset = first;
      repaired = true;
    }
  }
  return repaired;
}

std::uint64_t Job::samples_per_rank(std::uint32_t rank) const {
  return sampler::samples_per_rank(dataset_.samples.size(), cfg_.world_size, rank, cfg_.shards());
}

std::uint64_t Job::batches_per_epoch(std::uint32_t rank) const {
  return sampler::batches_per_epoch(samples_per_rank(rank), cfg_.batch_size, cfg_.drop_last);
}

proto::RingHeader* Job::ring_header(std::uint32_t ring) const {
  return reinterpret_cast<proto::RingHeader*>(segment_->base() + plan_.ring_table_offset) + ring;
}

proto::SlotHeader* Job::slot_header(std::uint32_t ring, std::uint32_t slot) const {
  const std::uint64_t off = plan_.first_slot_offset +
                            (static_cast<std::uint64_t>(ring) * cfg_.prefetch + slot) * plan_.slot_stride;
  return reinterpret_cast<proto::SlotHeader*>(segment_->base() + off);
}

std::uint8_t* Job::payload(std::uint32_t ring, std::uint32_t slot) const {
  return reinterpret_cast<std::uint8_t*>(slot_header(ring, slot)) + plan_.payload_offset;
}

std::int64_t* Job::labels(std::uint32_t ring, std::uint32_t slot) const {
  if (label_dtype_ != 0) return rings_[ring]->slots[slot].class_labels.data();
  return reinterpret_cast<std::int64_t*>(label_region(ring, slot));
}

std::uint8_t* Job::label_region(std::uint32_t ring, std::uint32_t slot) const {
  return payload(ring, slot) + plan_.labels_offset;
}

std::int64_t* Job::ids(std::uint32_t ring, std::uint32_t slot) const {
  return reinterpret_cast<std::int64_t*>(payload(ring, slot) + plan_.ids_offset);
}

std::shared_ptr<Job::EpochStream> Job::make_stream(std::uint32_t rank, std::uint64_t epoch) const {
  auto st = std::make_shared<EpochStream>();
  st->epoch = epoch;
  const auto perm = sampler::epoch_permutation(static_cast<std::uint32_t>(dataset_.samples.size()),
                                               cfg_.shuffle, cfg_.seed, epoch);
  // Quarantined samples stay in the stream: batch k is always positions [kB, (k+1)B) of the
  // rank's share, whichever files are bad and whenever they were found (a restarted daemon
  // with a bigger quarantine, a resume at batch k). Bad ones are dropped inside their batch.
  st->ids = sampler::rank_samples(perm, cfg_.world_size, cfg_.first_rank + rank, cfg_.shards());
  return st;
}

void Job::set_slot_state(Ring& ring, std::uint32_t s, SlotState st) {
  ring.slots[s].state = st;
  auto* h = slot_header(ring.rank, s);
  std::atomic_ref<std::uint32_t>(h->state).store(static_cast<std::uint32_t>(st),
                                                 std::memory_order_release);
}

void Job::start() {
  std::vector<WorkItem> items;
  for (auto& ring : rings_) {
    std::lock_guard lock(ring->mu);
    ring->planning = make_stream(ring->rank, 0);
    plan_free_slots(*ring, items);
  }
  queue_.push(std::move(items));
}

void Job::plan_free_slots(Ring& ring, std::vector<WorkItem>& out) {
  if (failed_.load() || draining_.load()) return;
  const std::uint32_t B = cfg_.batch_size;
  for (std::uint32_t s = 0; s < ring.slots.size(); ++s) {
    Slot& slot = ring.slots[s];
    if (slot.state != SlotState::kFree) continue;
    settle_device_copy(ring, s);  // a device copy may still read the bytes workers rewrite

    // Move to the next epoch once this one has handed out its last batch.
    EpochStream* st = ring.planning.get();
    if (st->last_planned) {
      ring.planning = make_stream(ring.rank, st->epoch + 1);
      st = ring.planning.get();
    }
    std::size_t n = std::min<std::size_t>(B, st->remaining());
    if (cfg_.drop_last && n < B) n = 0;  // incomplete tail batch dropped
    const std::size_t after = st->remaining() - n;
    const bool last = after == 0 || (cfg_.drop_last && after < B);

    slot.state = SlotState::kFilling;
    slot.generation++;
    slot.stale = false;
    slot.epoch = st->epoch;
    slot.batch_index = st->next_batch++;
    slot.count = static_cast<std::uint32_t>(n);
    slot.flags = last ? proto::kBatchLastInEpoch : 0;
    slot.stream = ring.planning;
    slot.pending = static_cast<std::uint32_t>(n);
    st->last_planned = last;
    for (std::size_t j = 0; j < n; ++j) {
      slot.ids[j] = st->ids[st->cursor + j];
      slot.ok[j] = -1;
    }
    st->cursor += n;
    st->planned += n;
    if (last && cfg_.drop_last) st->cursor = st->ids.size();

    auto* h = slot_header(ring.rank, s);
    h->generation = slot.generation;
    h->epoch = slot.epoch;
    h->batch_index = slot.batch_index;
    h->count = 0;
    h->flags = 0;
    set_slot_state(ring, s, SlotState::kFilling);

    if (n == 0) {
      // A rank with no samples this epoch (fewer samples than ranks with drop_last): an empty
      // batch still carries the end-of-epoch flag so the consumer's epoch ends.
      publish(ring, s);
      continue;
    }
    for (std::uint32_t j = 0; j < n; ++j) {
      out.push_back(WorkItem{this, ring.rank, s, j, slot.generation});
      want_read(out.back(), slot.ids[j]);
    }
  }
}

void Job::record_error(std::uint64_t id, const image::SampleResult& r) {
  const std::string path = dataset_.path(id);
  const char* kind = image::to_string(r.error);
  {
    std::lock_guard lock(stats_mu_);
    stats_.errors[static_cast<int>(r.error)]++;
  }
  if (quarantined_[id].exchange(1) == 0) quarantined_count_++;
  if (quarantine_->add(path, kind, r.reason)) {
    spdlog::warn("job {}: {}: {} ({})", cfg_.name, path, r.reason, kind);
    std::lock_guard lock(stats_mu_);
    stats_.quarantined++;
  }
  if (cfg_.on_error == config::OnError::kFail) {
    std::lock_guard lock(stats_mu_);
    if (!failure_) {
      failure_ = path + ": " + r.reason;
      spdlog::error("job {} stopped (on_error: fail): {}", cfg_.name, *failure_);
    }
    failed_.store(true);
  }
}

void Job::run(const WorkItem& item, image::SampleProcessor& processor,
              std::vector<std::uint8_t>& file_buffer) {
  Ring& ring = *rings_[item.ring];
  std::uint32_t id;
  std::uint64_t epoch;
  {
    std::lock_guard lock(ring.mu);
    const Slot& slot = ring.slots[item.slot];
    // Invariant: a FILLING slot is never re-planned before all its items are done.
    STOKER_CHECK(slot.state == SlotState::kFilling && slot.generation == item.generation,
                 "work item for slot {}:{} in state {} gen {} (item gen {})", item.ring, item.slot,
                 static_cast<int>(slot.state), slot.generation, item.generation);
    id = slot.ids[item.position];
    epoch = slot.epoch;
  }

  image::SampleResult result;
  if (quarantined_[id].load() != 0) {
    // Known bad (this run or an earlier one's quarantine file): not read again, and dropped
    // from (or substituted in) its batch like a newly found bad file, without counting again.
    result.error = image::SampleErrorKind::kCorrupt;
  } else if (!failed_.load()) {
    const auto& sample = dataset_.samples[id];
    std::uint8_t* out = payload(item.ring, item.slot) +
                        static_cast<std::uint64_t>(item.position) * cfg_.pipeline.sample_bytes();
    if (cache_ && cache_->get(id, out)) {
      // Finished earlier (a deterministic pipeline gives the same bytes every epoch).
    } else if (read_sample(item, id, file_buffer, result)) {
      result = processor.process(file_buffer, cfg_.pixel_seed(), epoch, id, out);
      if (formats_.record(id, result.format)) {
        spdlog::info("job {}: formats by content: {}", cfg_.name, formats_.summary());
      }
      if (result.ok() && cache_) cache_->put(id, out);
    }
    if (result.ok()) {
      labels(item.ring, item.slot)[item.position] = sample.label;
      ids(item.ring, item.slot)[item.position] = id;
      std::lock_guard lock(stats_mu_);
      stats_.samples_ok++;
      stats_.decode_warnings += result.warnings;
    } else if (result.error != image::SampleErrorKind::kIo) {
      record_error(id, result);  // the bytes failed to decode: quarantined
    }
  } else {
    result.error = image::SampleErrorKind::kIo;  // job stopped: not decoded, not counted
  }
  drop_read(item);  // not read (quarantined, cached, job stopped): read-ahead frees its bytes

  std::vector<WorkItem> more;
  {
    std::unique_lock lock(ring.mu);
    Slot& slot = ring.slots[item.slot];
    slot.ok[item.position] = result.ok() ? 1 : 0;
    if (EpochStream* st = slot.stream.get(); st != nullptr && !slot.stale) {
      st->done++;
      st->good += result.ok() ? 1 : 0;
      if (!result.ok() && st->first_failures.size() < 3) {
        st->first_failures.push_back(dataset_.path(id) + ": " +
                                     (result.reason.empty() ? std::string("quarantined earlier") : result.reason));
      }
      check_epoch_failed(ring, *st);
    }
    if (--slot.pending == 0) {
      if (label_dtype_ == 0) {
        finish_batch(ring, item.slot, more);
      } else if (!drop_unwanted(ring, item.slot, more)) {
        // Mixed after bad samples are settled (the batch's final positions), outside the lock.
        settle_bad_samples(ring, item.slot);
        const std::uint64_t epoch_of = slot.epoch, batch = slot.batch_index;
        const std::uint32_t count = slot.count;
        lock.unlock();
        mix_batch(item.ring, item.slot, epoch_of, batch, count);
        lock.lock();
        if (!drop_unwanted(ring, item.slot, more)) {
          publish(ring, item.slot);
          if (consumed(ring, slot)) free_consumed(ring, more);
        }
      }
    }
  }
  queue_.push(std::move(more));
}

void Job::finish_batch(Ring& ring, std::uint32_t s, std::vector<WorkItem>& out) {
  if (drop_unwanted(ring, s, out)) return;
  settle_bad_samples(ring, s);
  publish(ring, s);
  // Planned before its readers moved past it (a reader joined further on): nobody takes it.
  if (consumed(ring, ring.slots[s])) free_consumed(ring, out);
}

bool Job::drop_unwanted(Ring& ring, std::uint32_t s, std::vector<WorkItem>& out) {
  Slot& slot = ring.slots[s];
  if (!slot.stale && !failed_.load()) return false;
  set_slot_state(ring, s, SlotState::kFree);
  slot.stream.reset();
  if (failed_.load()) {
    notify_ready_();  // wake the control thread to report the failure
    return true;
  }
  plan_free_slots(ring, out);
  return true;
}

void Job::mix_batch(std::uint32_t ring, std::uint32_t s, std::uint64_t epoch, std::uint64_t batch_index,
                    std::uint32_t count) {
  const proto::BatchGeometry g = geometry_of(cfg_);
  const MixDraw draw = draw_mix(cfg_.mix, cfg_.pixel_seed(), epoch, batch_index, cfg_.first_rank + ring, g.height, g.width);
  MixBatch b;
  b.images = payload(ring, s);
  b.count = count;
  b.geometry = g;
  b.labels = labels(ring, s);
  b.soft = label_region(ring, s);
  b.num_classes = label_width_;
  b.label_dtype = static_cast<proto::DType>(label_dtype_);
  apply_mix(draw, b);
}

void Job::settle_bad_samples(Ring& ring, std::uint32_t s) {
  Slot& slot = ring.slots[s];
  std::uint32_t bad = 0;
  for (std::uint32_t j = 0; j < slot.count; ++j) bad += slot.ok[j] == 0 ? 1 : 0;

  if (bad > 0 && cfg_.on_error == config::OnError::kSkip) {
    // The batch keeps its place in the epoch and ships short: no refill from later samples,
    // so batch boundaries never depend on which files are bad (exact resume, same batches
    // across restarts). Good samples are compacted to the front.
    const std::uint64_t bytes = cfg_.pipeline.sample_bytes();
    std::uint32_t w = 0;
    for (std::uint32_t j = 0; j < slot.count; ++j) {
      if (slot.ok[j] != 1) continue;
      if (w != j) {
        std::memmove(payload(ring.rank, s) + w * bytes, payload(ring.rank, s) + j * bytes, bytes);
        labels(ring.rank, s)[w] = labels(ring.rank, s)[j];
        ids(ring.rank, s)[w] = ids(ring.rank, s)[j];
        slot.ids[w] = slot.ids[j];
        slot.ok[w] = 1;
      }
      ++w;
    }
    slot.count = w;
  } else if (bad > 0 && cfg_.on_error == config::OnError::kSubstitute) {
    // Each bad position takes a copy of the nearest good sample of the same batch (image,
    // label and id), so the batch stays full and every label still matches its image.
    const std::uint64_t bytes = cfg_.pipeline.sample_bytes();
    std::uint32_t substituted = 0;
    for (std::uint32_t j = 0; j < slot.count; ++j) {
      if (slot.ok[j] != 0) continue;
      std::int64_t src = -1;
      for (std::uint32_t d = 1; d < slot.count && src < 0; ++d) {
        if (j >= d && slot.ok[j - d] == 1) src = j - d;
        else if (j + d < slot.count && slot.ok[j + d] == 1) src = j + d;
      }
      if (src < 0) continue;
      std::memcpy(payload(ring.rank, s) + j * bytes, payload(ring.rank, s) + src * bytes, bytes);
      labels(ring.rank, s)[j] = labels(ring.rank, s)[src];
      ids(ring.rank, s)[j] = ids(ring.rank, s)[src];
      ++substituted;
    }
    if (substituted < bad) slot.count = 0;  // no good sample at all in this batch
    std::lock_guard lock(stats_mu_);
    stats_.substituted += substituted;
  }
}

void Job::publish(Ring& ring, std::uint32_t s) {
  Slot& slot = ring.slots[s];
  auto* h = slot_header(ring.rank, s);
  h->count = slot.count;
  h->flags = slot.flags;
  slot.stream.reset();
  for (const Reader& r : ring.readers) {
    if (r.attached && r.device) copy_to_device(ring, s, r.device);  // ahead of the reader's request
  }
  set_slot_state(ring, s, SlotState::kReady);
  ring_header(ring.rank)->batches_published++;
  {
    std::lock_guard lock(stats_mu_);
    stats_.batches_published++;
  }
  notify_ready_();
}

std::optional<std::string> Job::failure() const {
  std::lock_guard lock(stats_mu_);
  return failure_;
}

JobStats Job::stats() const {
  std::lock_guard lock(stats_mu_);
  JobStats st = stats_;
  st.bytes_read = bytes_read_.load(std::memory_order_relaxed);
  return st;
}

}  // namespace stoker::job
