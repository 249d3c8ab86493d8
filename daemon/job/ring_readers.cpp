// Ring: the readers' side of the slot state machine (ring.hpp): who takes which batch, and
// when a slot may be planned again (attach, detach and its lease reclaim, take, release,
// replanning after a resume, drain, status).
#include <algorithm>
#include <chrono>

#include "log/log.hpp"
#include "job/ring.hpp"

namespace stoker::job {

using proto::SlotState;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::uint64_t bit(std::uint32_t reader) { return std::uint64_t{1} << reader; }

std::string pos_string(BatchPos p) {
  return "epoch " + std::to_string(p.epoch) + " batch " + std::to_string(p.batch);
}

}  // namespace

bool Ring::consumed(const Slot& slot) const {
  if (slot.leased_by != 0) return false;
  for (const Reader& r : readers_) {
    if (r.expected && !(slot.pos() < r.next)) return false;
  }
  return true;
}

void Ring::free_consumed(std::vector<WorkItem>& out) {
  for (std::uint32_t s = 0; s < slots_.size(); ++s) {
    Slot& slot = slots_[s];
    if (slot.state != SlotState::kReady && slot.state != SlotState::kLeased) continue;
    if (!consumed(slot)) continue;
    set_slot_state(s, SlotState::kFree);
    memory_.header->batches_released++;
  }
  plan_free_slots(out);
}

void Ring::replan(BatchPos from, std::vector<WorkItem>& out) {
  for (std::uint32_t s = 0; s < slots_.size(); ++s) {
    Slot& slot = slots_[s];
    if (slot.state == SlotState::kReady || slot.state == SlotState::kLeased) {
      slot.leased_by = 0;
      set_slot_state(s, SlotState::kFree);
    } else if (slot.state == SlotState::kFilling) {
      slot.stale = true;  // workers still write into it; freed when they finish
    }
  }
  auto st = make_stream(from.epoch);
  const std::uint64_t skip = std::min<std::uint64_t>(from.batch * cfg_.batch_size, st->ids.size());
  st->cursor = static_cast<std::size_t>(skip);
  st->whole_epoch = st->whole_epoch && skip == 0;
  st->next_batch = from.batch;
  planning_ = std::move(st);
  plan_free_slots(out);
}

bool Ring::any_reader_attached() const {
  base::MutexLock lock(mu_);
  return any_attached();
}

base::Result<AttachResult> Ring::attach(std::uint32_t reader, BatchPos want, std::optional<EpochStart> start,
                                        std::shared_ptr<delivery::DeviceRing> device, std::vector<WorkItem>& out) {
  base::MutexLock lock(mu_);
  Reader& me = readers_.at(reader);
  if (me.attached) return AttachResult::kBusy;
  if (start && start->consumed == 0) start.reset();  // position 0 is the ordinary epoch

  // What the ring holds or plans next: live slots are consecutive batches, so a position in
  // [oldest, next_planned] can be served without dropping anything.
  const EpochStream& st = *planning_;
  const BatchPos next_planned = st.last_planned ? BatchPos{st.epoch + 1, 0} : BatchPos{st.epoch, st.next_batch};
  BatchPos oldest = next_planned;
  for (const Slot& slot : slots_) {
    if (slot.live()) oldest = std::min(oldest, slot.pos());
  }
  // Batches planned under another elastic start were cut from another remainder.
  // A reader joining a group that is past its elastic epoch needs no position.
  const bool same_cut = start == start_ || (!start && start_ && start_->epoch < want.epoch);
  const bool held = oldest <= want && want <= next_planned && same_cut;

  if (!any_attached()) {
    // The group (re)starts here: every reader is expected from this position, so the first
    // to connect cannot leave the others behind.
    if (!held) {
      if (start) {
        stoker::log::info(
            "job {} rank {}: consumer starts at {} of the rest of epoch {} after {} samples consumed by the "
            "whole world; re-planning",
            cfg_.job_name, cfg_.rank, pos_string(want), start->epoch, start->consumed);
      } else {
        stoker::log::info("job {} rank {}: consumer starts at {}; re-planning", cfg_.job_name, cfg_.rank,
                          pos_string(want));
      }
      start_ = start;
      replan(want, out);
    }
    for (Reader& r : readers_) {
      r.expected = true;
      r.next = want;
    }
  } else if (!same_cut) {
    return base::Status::error(
        "reader " + std::to_string(reader) + " of rank " + std::to_string(cfg_.rank) + " of job '" + cfg_.job_name +
        "' starts at global position " + std::to_string(start ? start->consumed : 0) + " of epoch " +
        std::to_string(start ? start->epoch : want.epoch) + ", but the rank's other readers started at global position " +
        std::to_string(start_ ? start_->consumed : 0) + " of epoch " +
        std::to_string(start_ ? start_->epoch : want.epoch) + "; the readers of a rank take the same batches together");
  } else if (!held) {
    BatchPos group = next_planned;
    for (const Reader& r : readers_) {
      if (r.attached) group = std::min(group, r.next);
    }
    return base::Status::error(
        "reader " + std::to_string(reader) + " of rank " + std::to_string(cfg_.rank) + " of job '" + cfg_.job_name +
        "' asks for " + pos_string(want) + ", but the rank's other readers are at " + pos_string(group) +
        " (batches " + pos_string(oldest) + " .. " + pos_string(next_planned) +
        " can be joined); the readers of a rank take the same batches together: restart them together");
  } else {
    me.next = want;
    me.expected = true;
  }
  me.attached = true;
  me.device = std::move(device);
  free_consumed(out);  // batches before `want` that only this reader held
  return AttachResult::kAttached;
}

std::shared_ptr<delivery::DeviceRing> Ring::detach(std::uint32_t reader, std::vector<WorkItem>& out,
                                                   const std::vector<std::uint32_t>& untaken) {
  std::uint32_t reclaimed = 0;
  std::shared_ptr<delivery::DeviceRing> device;
  {
    base::MutexLock lock(mu_);
    Reader& me = readers_.at(reader);
    me.attached = false;
    device = drop_device(me);
    for (const std::uint32_t s : untaken) {
      if (s >= slots_.size() || (slots_[s].leased_by & bit(reader)) == 0) continue;
      Slot& slot = slots_[s];
      slot.leased_by &= ~bit(reader);  // sent, never seen: still this reader's to take
      if (slot.leased_by == 0) set_slot_state(s, SlotState::kReady);
      me.next = std::min(me.next, slot.pos());
    }
    for (std::uint32_t s = 0; s < slots_.size(); ++s) {
      Slot& slot = slots_[s];
      if ((slot.leased_by & bit(reader)) == 0) continue;
      slot.leased_by &= ~bit(reader);  // taken, so behind `me.next`: consumed as far as it goes
      if (slot.leased_by == 0) set_slot_state(s, SlotState::kReady);
      ++reclaimed;
    }
    if (any_attached()) {
      me.expected = false;  // dropped: the others keep flowing
    } else {
      // The group is idle; whoever connects first sets its position again (attach), and until
      // then nothing past the last reader's position is given up.
      for (Reader& r : readers_) {
        r.expected = true;
        r.next = me.next;
      }
    }
    free_consumed(out);
  }
  if (reclaimed > 0) {
    stoker::log::info("job {} rank {}: reclaimed {} leased slot(s)", cfg_.job_name, cfg_.rank, reclaimed);
  }
  return device;
}

std::optional<proto::BatchMsg> Ring::take(std::uint32_t reader) {
  base::MutexLock lock(mu_);
  Reader& me = readers_.at(reader);
  for (std::uint32_t s = 0; s < slots_.size(); ++s) {
    Slot& slot = slots_[s];
    if ((slot.state != SlotState::kReady && slot.state != SlotState::kLeased) || slot.pos() != me.next ||
        (slot.leased_by & bit(reader)) != 0) {
      continue;
    }
    // A batch prefetched before this reader attached (or copied for an earlier one) is
    // copied now; the reader's stream waits for it on the GPU.
    const bool on_device =
        me.device && (std::find(slot.copied_to.begin(), slot.copied_to.end(), me.device) != slot.copied_to.end() ||
                      copy_to_device(s, me.device));
    slot.leased_by |= bit(reader);
    slot.leased_at[reader] = std::chrono::steady_clock::now();
    set_slot_state(s, SlotState::kLeased);
    auto msg = proto::make_message<proto::BatchMsg>(proto::MsgType::kBatch);
    msg.slot = s;
    msg.generation = slot.generation;
    msg.epoch = slot.epoch;
    msg.batch_index = slot.batch_index;
    msg.count = slot.count;
    msg.flags = slot.flags | (on_device ? proto::kBatchOnDevice : 0u);
    me.next = (slot.flags & proto::kBatchLastInEpoch) ? BatchPos{slot.epoch + 1, 0}
                                                       : BatchPos{slot.epoch, slot.batch_index + 1};
    return msg;
  }
  return std::nullopt;
}

bool Ring::release(std::uint32_t reader, std::uint32_t s, std::uint32_t generation, std::vector<WorkItem>& out) {
  base::MutexLock lock(mu_);
  if (s >= slots_.size() || reader >= readers_.size()) return false;
  Slot& slot = slots_[s];
  if (slot.state != SlotState::kLeased || slot.generation != generation || (slot.leased_by & bit(reader)) == 0) {
    return false;
  }
  slot.leased_by &= ~bit(reader);
  if (slot.leased_by == 0) set_slot_state(s, SlotState::kReady);
  free_consumed(out);
  return true;
}

void Ring::drain() {
  // Under the mutex: a planner that read the flag clear holds it, so once this returns no
  // planner of this ring runs again.
  base::MutexLock lock(mu_);
  draining_ = true;
}

bool Ring::drained_for(std::uint32_t reader) const {
  base::MutexLock lock(mu_);
  const Reader& me = readers_.at(reader);
  for (const Slot& slot : slots_) {
    if (slot.state == SlotState::kFilling && !slot.stale) return false;
    const bool ready = slot.state == SlotState::kReady || slot.state == SlotState::kLeased;
    if (ready && slot.pos() >= me.next && (slot.leased_by & bit(reader)) == 0) return false;
  }
  return true;
}

void Ring::touch_leases(std::uint32_t reader) {
  base::MutexLock lock(mu_);
  if (reader >= readers_.size()) return;
  const auto now = std::chrono::steady_clock::now();
  for (auto& s : slots_) {
    if ((s.leased_by & bit(reader)) != 0) s.leased_at[reader] = now;
  }
}

double Ring::oldest_lease_s(std::uint32_t reader) const {
  base::MutexLock lock(mu_);
  double oldest = 0;
  for (const auto& s : slots_) {
    if ((s.leased_by & bit(reader)) != 0) oldest = std::max(oldest, seconds_since(s.leased_at[reader]));
  }
  return oldest;
}

RingStatus Ring::status(std::uint64_t per_epoch) const {
  base::MutexLock lock(mu_);
  RingStatus r{};
  r.rank = cfg_.rank;  // global
  per_epoch = std::max<std::uint64_t>(per_epoch, 1);
  auto index = [&](BatchPos p) { return p.epoch * per_epoch + p.batch; };
  r.attached = any_attached();
  for (const auto& s : slots_) {
    switch (s.state) {
      case SlotState::kFree: r.free++; break;
      case SlotState::kFilling: r.filling++; break;
      case SlotState::kReady: r.ready++; break;
      case SlotState::kLeased: r.leased++; break;
    }
  }
  BatchPos slowest{UINT64_MAX, UINT64_MAX}, fastest{};
  for (const Reader& rd : readers_) {
    if (!rd.expected) continue;
    slowest = std::min(slowest, rd.next);
    fastest = std::max(fastest, rd.next);
  }
  if (slowest.epoch == UINT64_MAX) slowest = readers_[0].next;
  r.next_epoch = slowest.epoch;
  r.next_batch = slowest.batch;
  for (std::uint32_t k = 0; k < readers_.size(); ++k) {
    const Reader& rd = readers_[k];
    ReaderStatus rs{};
    rs.reader = k;
    rs.attached = rd.attached;
    rs.next_epoch = rd.next.epoch;
    rs.next_batch = rd.next.batch;
    for (const auto& s : slots_) {
      if ((s.leased_by & bit(k)) == 0) continue;
      rs.leased++;
      rs.oldest_lease_s = std::max(rs.oldest_lease_s, seconds_since(s.leased_at[k]));
    }
    rs.behind = rd.expected && index(fastest) > index(rd.next) ? index(fastest) - index(rd.next) : 0;
    if (rd.device) rs.device_uuid = device::uuid_string(rd.device->uuid());
    r.oldest_lease_s = std::max(r.oldest_lease_s, rs.oldest_lease_s);
    r.readers.push_back(std::move(rs));
  }
  r.device_uuid = r.readers[0].device_uuid;
  r.published = memory_.header->batches_published;
  r.released = memory_.header->batches_released;
  return r;
}

}  // namespace stoker::job
