// Job's reader groups: who takes which batch, and when a slot may be planned again.
//
// Every rank has `readers` readers (1 unless the job fans out). They all take the same
// batches, in order, from the same slots. A slot is LEASED while any reader holds it and
// goes back to FREE only when every expected reader is past it (Job::consumed), so a reader
// that falls behind holds its group back by at most the ring's `prefetch` slots and never
// loses a batch; a reader that dies is dropped and the others keep flowing.
#include <algorithm>
#include <chrono>

#include <spdlog/spdlog.h>

#include "job/job.hpp"
#include "job/job_state.hpp"

namespace stoker::job {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::uint64_t bit(std::uint32_t reader) { return std::uint64_t{1} << reader; }

std::string pos_string(BatchPos p) {
  return "epoch " + std::to_string(p.epoch) + " batch " + std::to_string(p.batch);
}

}  // namespace

bool Job::consumed(const Ring& ring, const Slot& slot) {
  if (slot.leased_by != 0) return false;
  for (const Reader& r : ring.readers) {
    if (r.expected && !(slot.pos() < r.next)) return false;
  }
  return true;
}

void Job::free_consumed(Ring& ring, std::vector<WorkItem>& out) {
  for (std::uint32_t s = 0; s < ring.slots.size(); ++s) {
    Slot& slot = ring.slots[s];
    if (slot.state != SlotState::kReady && slot.state != SlotState::kLeased) continue;
    if (!consumed(ring, slot)) continue;
    set_slot_state(ring, s, SlotState::kFree);
    ring_header(ring.rank)->batches_released++;
  }
  plan_free_slots(ring, out);
}

void Job::replan(Ring& ring, std::uint64_t epoch, std::uint64_t batch, std::vector<WorkItem>& out) {
  for (std::uint32_t s = 0; s < ring.slots.size(); ++s) {
    Slot& slot = ring.slots[s];
    if (slot.state == SlotState::kReady || slot.state == SlotState::kLeased) {
      slot.leased_by = 0;
      set_slot_state(ring, s, SlotState::kFree);
    } else if (slot.state == SlotState::kFilling) {
      slot.stale = true;  // workers still write into it; freed when they finish
    }
  }
  auto st = make_stream(ring.rank, epoch);
  const std::uint64_t skip = std::min<std::uint64_t>(batch * cfg_.batch_size, st->ids.size());
  st->cursor = static_cast<std::size_t>(skip);
  st->whole_epoch = skip == 0;
  st->next_batch = batch;
  ring.planning = std::move(st);
  plan_free_slots(ring, out);
}

AttachResult Job::attach(std::uint32_t rank, std::uint32_t reader, std::uint64_t epoch, std::uint64_t batch,
                         std::shared_ptr<delivery::DeviceRing> device, std::string& why) {
  Ring& ring = ring_of(rank);
  const BatchPos want{epoch, batch};
  std::vector<WorkItem> items;
  {
    std::lock_guard lock(ring.mu);
    Reader& me = ring.readers.at(reader);
    if (me.attached) return AttachResult::kBusy;

    // What the ring holds or plans next: live slots are consecutive batches, so a position in
    // [oldest, next_planned] can be served without dropping anything.
    const EpochStream& st = *ring.planning;
    const BatchPos next_planned = st.last_planned ? BatchPos{st.epoch + 1, 0} : BatchPos{st.epoch, st.next_batch};
    BatchPos oldest = next_planned;
    for (const Slot& slot : ring.slots) {
      if (slot.live()) oldest = std::min(oldest, slot.pos());
    }
    const bool held = oldest <= want && want <= next_planned;

    if (!ring.any_attached()) {
      // The group (re)starts here: every reader is expected from this position, so the first
      // to connect cannot leave the others behind.
      if (!held) {
        spdlog::info("job {} rank {}: consumer starts at {}; re-planning", cfg_.name, rank, pos_string(want));
        replan(ring, epoch, batch, items);
      }
      for (Reader& r : ring.readers) {
        r.expected = true;
        r.next = want;
      }
    } else if (!held) {
      BatchPos group = next_planned;
      for (const Reader& r : ring.readers) {
        if (r.attached) group = std::min(group, r.next);
      }
      why = "reader " + std::to_string(reader) + " of rank " + std::to_string(rank) + " of job '" + cfg_.name +
            "' asks for " + pos_string(want) + ", but the rank's other readers are at " + pos_string(group) +
            " (batches " + pos_string(oldest) + " .. " + pos_string(next_planned) +
            " can be joined); the readers of a rank take the same batches together: restart them together";
      return AttachResult::kOutOfStep;
    } else {
      me.next = want;
      me.expected = true;
    }
    me.attached = true;
    me.device = std::move(device);
    free_consumed(ring, items);  // batches before `want` that only this reader held
  }
  queue_.push(std::move(items));
  return AttachResult::kAttached;
}

std::shared_ptr<delivery::DeviceRing> Job::detach(std::uint32_t rank, std::uint32_t reader) {
  Ring& ring = ring_of(rank);
  std::vector<WorkItem> items;
  std::uint32_t reclaimed = 0;
  std::shared_ptr<delivery::DeviceRing> device;
  {
    std::lock_guard lock(ring.mu);
    Reader& me = ring.readers.at(reader);
    me.attached = false;
    device = drop_device(ring, me);
    for (std::uint32_t s = 0; s < ring.slots.size(); ++s) {
      Slot& slot = ring.slots[s];
      if ((slot.leased_by & bit(reader)) == 0) continue;
      slot.leased_by &= ~bit(reader);  // taken, so behind `me.next`: consumed as far as it goes
      if (slot.leased_by == 0) set_slot_state(ring, s, SlotState::kReady);
      ++reclaimed;
    }
    if (ring.any_attached()) {
      me.expected = false;  // dropped: the others keep flowing
    } else {
      // The group is idle; whoever connects first sets its position again (attach), and until
      // then nothing past the last reader's position is given up.
      for (Reader& r : ring.readers) {
        r.expected = true;
        r.next = me.next;
      }
    }
    free_consumed(ring, items);
  }
  if (reclaimed > 0) {
    spdlog::info("job {} rank {}: reclaimed {} leased slot(s)", cfg_.name, rank, reclaimed);
  }
  queue_.push(std::move(items));
  return device;
}

std::optional<proto::BatchMsg> Job::take_ready(std::uint32_t rank, std::uint32_t reader) {
  Ring& ring = ring_of(rank);
  std::lock_guard lock(ring.mu);
  Reader& me = ring.readers.at(reader);
  for (std::uint32_t s = 0; s < ring.slots.size(); ++s) {
    Slot& slot = ring.slots[s];
    if ((slot.state != SlotState::kReady && slot.state != SlotState::kLeased) || slot.pos() != me.next ||
        (slot.leased_by & bit(reader)) != 0) {
      continue;
    }
    // A batch prefetched before this reader attached (or copied for an earlier one) is
    // copied now; the reader's stream waits for it on the GPU.
    const bool on_device =
        me.device && (std::find(slot.copied_to.begin(), slot.copied_to.end(), me.device) != slot.copied_to.end() ||
                      copy_to_device(ring, s, me.device));
    slot.leased_by |= bit(reader);
    slot.leased_at[reader] = std::chrono::steady_clock::now();
    set_slot_state(ring, s, SlotState::kLeased);
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

bool Job::release(std::uint32_t rank, std::uint32_t reader, std::uint32_t s, std::uint32_t generation) {
  Ring& ring = ring_of(rank);
  std::vector<WorkItem> items;
  {
    std::lock_guard lock(ring.mu);
    if (s >= ring.slots.size()) return false;
    Slot& slot = ring.slots[s];
    if (slot.state != SlotState::kLeased || slot.generation != generation ||
        (slot.leased_by & bit(reader)) == 0) {
      return false;
    }
    slot.leased_by &= ~bit(reader);
    if (slot.leased_by == 0) set_slot_state(ring, s, SlotState::kReady);
    free_consumed(ring, items);
  }
  queue_.push(std::move(items));
  return true;
}

double Job::oldest_lease_s(std::uint32_t rank, std::uint32_t reader) {
  Ring& ring = ring_of(rank);
  std::lock_guard lock(ring.mu);
  double oldest = 0;
  for (const auto& s : ring.slots) {
    if ((s.leased_by & bit(reader)) != 0) oldest = std::max(oldest, seconds_since(s.leased_at[reader]));
  }
  return oldest;
}

std::vector<RingStatus> Job::ring_status() const {
  std::vector<RingStatus> out;
  for (const auto& ring : rings_) {
    std::lock_guard lock(ring->mu);
    RingStatus r{};
    r.rank = cfg_.first_rank + ring->rank;  // global
    const std::uint64_t per_epoch = std::max<std::uint64_t>(batches_per_epoch(r.rank), 1);
    auto index = [&](BatchPos p) { return p.epoch * per_epoch + p.batch; };
    r.attached = ring->any_attached();
    for (const auto& s : ring->slots) {
      switch (s.state) {
        case SlotState::kFree: r.free++; break;
        case SlotState::kFilling: r.filling++; break;
        case SlotState::kReady: r.ready++; break;
        case SlotState::kLeased: r.leased++; break;
      }
    }
    BatchPos slowest{UINT64_MAX, UINT64_MAX}, fastest{};
    for (const Reader& rd : ring->readers) {
      if (!rd.expected) continue;
      slowest = std::min(slowest, rd.next);
      fastest = std::max(fastest, rd.next);
    }
    if (slowest.epoch == UINT64_MAX) slowest = ring->readers[0].next;
    r.next_epoch = slowest.epoch;
    r.next_batch = slowest.batch;
    for (std::uint32_t k = 0; k < ring->readers.size(); ++k) {
      const Reader& rd = ring->readers[k];
      ReaderStatus rs{};
      rs.reader = k;
      rs.attached = rd.attached;
      rs.next_epoch = rd.next.epoch;
      rs.next_batch = rd.next.batch;
      for (const auto& s : ring->slots) {
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
    r.published = ring_header(ring->rank)->batches_published;
    r.released = ring_header(ring->rank)->batches_released;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace stoker::job

namespace stoker::job {

void Job::drain() {
  // Each ring's lock is taken once after the flag is set: a planner that read the flag clear
  // holds that lock, so once this returns no ring plans again.
  draining_.store(true);
  for (auto& ring : rings_) std::lock_guard lock(ring->mu);
}

bool Job::drained_for(std::uint32_t rank, std::uint32_t reader) {
  if (!draining_.load()) return false;
  Ring& ring = ring_of(rank);
  std::lock_guard lock(ring.mu);
  const Reader& me = ring.readers.at(reader);
  for (const Slot& slot : ring.slots) {
    if (slot.state == SlotState::kFilling && !slot.stale) return false;
    const bool ready = slot.state == SlotState::kReady || slot.state == SlotState::kLeased;
    if (ready && slot.pos() >= me.next && (slot.leased_by & bit(reader)) == 0) return false;
  }
  return true;
}

void Job::settle_device_copies() {
  for (auto& ring : rings_) {
    std::lock_guard lock(ring->mu);
    for (std::uint32_t s = 0; s < ring->slots.size(); ++s) settle_device_copy(*ring, s);
  }
}

}  // namespace stoker::job
