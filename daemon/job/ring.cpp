// Ring: planning and the worker side of the slot state machine (ring.hpp). The readers' side
// (attach, detach, take, release, drain, status) is in ring_readers.cpp.
#include "job/ring.hpp"

#include <algorithm>
#include <new>

#include "log/log.hpp"
#include "core/check.hpp"

namespace stoker::job {

using proto::SlotState;

Ring::Ring(RingConfig cfg, RingMemory memory, RingHooks& hooks)
    : cfg_(std::move(cfg)), memory_(std::move(memory)), hooks_(hooks) {
  STOKER_CHECK(memory_.slots.size() == cfg_.slots && memory_.header != nullptr,
               "ring {} has {} slot header(s) for {} slot(s)", cfg_.index, memory_.slots.size(), cfg_.slots);
  STOKER_CHECK(cfg_.readers >= 1 && cfg_.readers <= 64, "ring {}: {} readers (1..64: a bit each)", cfg_.index,
               cfg_.readers);
  base::MutexLock lock(mu_);
  slots_.resize(cfg_.slots);
  readers_.resize(cfg_.readers);
  for (auto& s : slots_) {
    s.ids.resize(cfg_.batch_size);
    s.ok.resize(cfg_.batch_size);
    s.leased_at.resize(cfg_.readers);
  }
}

std::shared_ptr<Ring::EpochStream> Ring::make_stream(std::uint64_t epoch) {
  auto st = std::make_shared<EpochStream>();
  st->epoch = epoch;
  // Quarantined samples stay in the stream: batch k is always positions [kB, (k+1)B) of the
  // rank's share, whichever files are bad and whenever they were found (a restarted daemon
  // with a bigger quarantine, a resume at batch k). Bad ones are dropped inside their batch.
  // An elastic resume cuts only its own epoch; the streams after it are whole epochs again.
  const std::uint64_t consumed = start_ && start_->epoch == epoch ? start_->consumed : 0;
  st->ids = hooks_.epoch_ids(epoch, consumed);
  st->whole_epoch = consumed == 0;
  return st;
}

bool Ring::any_attached() const {
  for (const auto& r : readers_) {
    if (r.attached) return true;
  }
  return false;
}

void Ring::set_slot_state(std::uint32_t s, SlotState st) {
  slots_[s].state = st;
  std::atomic_ref<std::uint32_t>(memory_.slots[s]->state).store(static_cast<std::uint32_t>(st),
                                                                 std::memory_order_release);
}

void Ring::start(std::vector<WorkItem>& out) {
  base::MutexLock lock(mu_);
  planning_ = make_stream(0);
  plan_free_slots(out);
}

void Ring::retry_planning(std::vector<WorkItem>& out) {
  base::MutexLock lock(mu_);
  if (plan_failed_) plan_free_slots(out);
}

void Ring::plan_free_slots(std::vector<WorkItem>& out) {
  if (hooks_.stopped() || draining_) return;
  const std::uint32_t B = cfg_.batch_size;
  for (std::uint32_t s = 0; s < slots_.size(); ++s) {
    Slot& slot = slots_[s];
    if (slot.state != SlotState::kFree) continue;
    settle_device_copy(s);  // a device copy may still read the bytes workers rewrite

    // Move to the next epoch once this one has handed out its last batch.
    EpochStream* st = planning_.get();
    if (st->last_planned) {
      const std::uint64_t next_epoch = st->epoch + 1;  // `st` may be freed once planning_ moves on
      try {
        planning_ = make_stream(next_epoch);
      } catch (const std::bad_alloc&) {
        // The machine is out of memory (the order's size was bounded at load): a fault of the
        // machine, not of the job. Nothing is planned now; retry_planning() tries again each
        // turn of the control loop, and the consumers wait meanwhile.
        if (!plan_failed_) {
          stoker::log::error(
              "job {} rank {}: out of memory planning epoch {} (its order of the rank's samples); "
              "retrying each second, consumers wait meanwhile",
              cfg_.job_name, cfg_.rank, next_epoch);
        }
        plan_failed_ = true;
        return;
      }
      if (plan_failed_) {
        stoker::log::info("job {} rank {}: planned epoch {} after running out of memory", cfg_.job_name, cfg_.rank,
                          next_epoch);
      }
      plan_failed_ = false;
      st = planning_.get();
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
    slot.stream = planning_;
    slot.pending = static_cast<std::uint32_t>(n);
    st->last_planned = last;
    for (std::size_t j = 0; j < n; ++j) {
      slot.ids[j] = st->ids[st->cursor + j];
      slot.ok[j] = -1;
    }
    st->cursor += n;
    st->planned += n;
    if (last && cfg_.drop_last) st->cursor = st->ids.size();

    auto* h = memory_.slots[s];
    h->generation = slot.generation;
    h->epoch = slot.epoch;
    h->batch_index = slot.batch_index;
    h->count = 0;
    h->flags = 0;
    set_slot_state(s, SlotState::kFilling);

    if (n == 0) {
      // A rank with no samples this epoch (fewer samples than ranks with drop_last): an empty
      // batch still carries the end-of-epoch flag so the consumer's epoch ends.
      publish(s);
      check_epoch_done(*st);
      continue;
    }
    for (std::uint32_t j = 0; j < n; ++j) hooks_.planned(s, j, slot.generation, slot.ids[j], out);
  }
}

Ring::Sample Ring::begin_sample(const WorkItem& item) const {
  base::MutexLock lock(mu_);
  const Slot& slot = slots_.at(item.slot);
  // Invariant: a FILLING slot is never re-planned before all its items are done.
  STOKER_CHECK(slot.state == SlotState::kFilling && slot.generation == item.generation,
               "work item for slot {}:{} in state {} gen {} (item gen {})", item.ring, item.slot,
               static_cast<int>(slot.state), slot.generation, item.generation);
  return Sample{slot.ids[item.position], slot.epoch};
}

void Ring::sample_done(const WorkItem& item, bool ok, const std::string* failure, std::vector<WorkItem>& out) {
  base::MutexLock lock(mu_);
  const std::uint32_t s = item.slot;
  Slot& slot = slots_[s];
  STOKER_CHECK(slot.state == SlotState::kFilling && slot.generation == item.generation && slot.pending > 0,
               "sample done for slot {}:{} in state {} gen {} (item gen {}), {} pending", item.ring, s,
               static_cast<int>(slot.state), slot.generation, item.generation, slot.pending);
  slot.ok[item.position] = ok ? 1 : 0;
  if (EpochStream* st = slot.stream.get(); st != nullptr && !slot.stale) {
    st->done++;
    st->good += ok ? 1 : 0;
    if (!ok && failure != nullptr && st->first_failures.size() < 3) st->first_failures.push_back(*failure);
    check_epoch_failed(*st);
    check_epoch_done(*st);
  }
  if (--slot.pending != 0) return;

  if (drop_unwanted(s, out)) return;
  settle(s);
  if (hooks_.mixes()) {
    // Mixed after bad samples are settled (the batch's final positions), outside the lock.
    const SlotBatch batch = batch_of(s);
    lock.unlock();
    hooks_.mix(batch);
    lock.lock();
    if (drop_unwanted(s, out)) return;
  }
  publish(s);
  // Planned before its readers moved past it (a reader joined further on): nobody takes it.
  if (consumed(slot)) free_consumed(out);
}

bool Ring::drop_unwanted(std::uint32_t s, std::vector<WorkItem>& out) {
  Slot& slot = slots_[s];
  const bool stopped = hooks_.stopped();
  if (!slot.stale && !stopped) return false;
  set_slot_state(s, SlotState::kFree);
  slot.stream.reset();
  if (stopped) {
    hooks_.notify();  // wake the control thread to report the failure
    return true;
  }
  plan_free_slots(out);
  return true;
}

SlotBatch Ring::batch_of(std::uint32_t s) {
  Slot& slot = slots_[s];
  return SlotBatch{s, slot.epoch, slot.batch_index, slot.count, slot.ids.data(), slot.ok.data()};
}

void Ring::settle(std::uint32_t s) {
  slots_[s].count = hooks_.settle(batch_of(s));
}

void Ring::publish(std::uint32_t s) {
  Slot& slot = slots_[s];
  auto* h = memory_.slots[s];
  h->count = slot.count;
  h->flags = slot.flags;
  slot.stream.reset();
  for (const Reader& r : readers_) {
    if (r.attached && r.device) copy_to_device(s, r.device);  // ahead of the reader's request
  }
  set_slot_state(s, SlotState::kReady);
  memory_.header->batches_published++;
  hooks_.published();
}

void Ring::check_epoch_failed(const EpochStream& st) {
  if (!st.whole_epoch || !st.last_planned || st.planned == 0 || st.done != st.planned || st.good != 0) return;
  hooks_.epoch_failed(st.epoch, st.done, st.first_failures);
}

void Ring::check_epoch_done(EpochStream& st) {
  if (st.done_reported || !st.last_planned || st.done != st.planned) return;
  st.done_reported = true;
  hooks_.epoch_done(st.epoch);
}

bool Ring::copy_to_device(std::uint32_t s, const std::shared_ptr<delivery::DeviceRing>& to) {
  Slot& slot = slots_[s];
  if (!hooks_.copy_to_device(s, slot.count, slot.epoch, slot.batch_index, *to)) return false;
  // Each reader's ring is copied at most once per planning of the slot; several readers on
  // several GPUs each have their own copy reading the same host bytes.
  if (std::find(slot.copied_to.begin(), slot.copied_to.end(), to) == slot.copied_to.end()) {
    slot.copied_to.push_back(to);
  }
  return true;
}

void Ring::settle_device_copy(std::uint32_t s) {
  Slot& slot = slots_[s];
  for (const auto& ring_copy : slot.copied_to) ring_copy->wait_host_read(s);
  slot.copied_to.clear();
}

std::shared_ptr<delivery::DeviceRing> Ring::drop_device(Reader& reader) {
  if (!reader.device) return nullptr;
  for (std::uint32_t s = 0; s < slots_.size(); ++s) {
    auto& copies = slots_[s].copied_to;
    if (std::find(copies.begin(), copies.end(), reader.device) == copies.end()) continue;
    reader.device->wait_host_read(s);
    std::erase(copies, reader.device);
  }
  return std::move(reader.device);
}

void Ring::settle_device_copies() {
  base::MutexLock lock(mu_);
  for (std::uint32_t s = 0; s < slots_.size(); ++s) settle_device_copy(s);
}

}  // namespace stoker::job
