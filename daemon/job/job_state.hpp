// Job's per-ring and per-slot state, shared by job.cpp and job_device.cpp only.
#pragma once

#include <chrono>

#include <memory>
#include <mutex>
#include <vector>

#include "job/job.hpp"

namespace stoker::job {

using proto::SlotState;

// A place in a rank's stream of batches, ordered epoch first.
struct BatchPos {
  std::uint64_t epoch = 0;
  std::uint64_t batch = 0;
  auto operator<=>(const BatchPos&) const = default;
};

// One process reading a rank's batches; with `readers: K` the K readers of a rank get the
// same batches from the same slots (fan-out).
struct Job::Reader {
  bool attached = false;
  // An expected reader holds every batch from `next` on until it has taken and released it.
  // Attached readers are expected; so is every reader of a group that is (re)starting
  // (none attached yet), so the first to connect cannot run ahead of the others. A reader
  // that disconnects while others read is dropped: not expected until it attaches again.
  bool expected = true;
  BatchPos next;                          // the next batch it takes
  std::shared_ptr<delivery::DeviceRing> device;     // its device ring, when it takes device batches
};

// The rank's samples of one epoch and how far planning has taken them.
struct Job::EpochStream {
  std::uint64_t epoch = 0;
  std::vector<std::uint32_t> ids;
  std::size_t cursor = 0;          // next unclaimed position in ids
  std::uint64_t next_batch = 0;    // index the next planned batch gets
  bool last_planned = false;       // a batch flagged kBatchLastInEpoch exists
  // Outcome of the samples planned from this stream (guarded by the ring's lock), to end the
  // job when a whole epoch fails; only for streams that start at the epoch's beginning.
  bool whole_epoch = true;
  std::size_t planned = 0, done = 0, good = 0;
  std::vector<std::string> first_failures;  // "path: reason", at most 3

  std::size_t remaining() const { return ids.size() - cursor; }
};

struct Job::Slot {
  SlotState state = SlotState::kFree;
  std::uint32_t generation = 0;
  bool stale = false;              // FILLING but no longer wanted: freed when workers finish
  std::uint64_t epoch = 0;
  std::uint64_t batch_index = 0;
  std::uint32_t count = 0;
  std::uint32_t flags = 0;
  std::uint32_t pending = 0;       // positions still being processed
  std::shared_ptr<EpochStream> stream;
  std::vector<std::uint32_t> ids;  // sample id per position
  std::vector<std::int8_t> ok;     // per position: 1 good, 0 bad, -1 pending
  // Mixing jobs: class index per position (the segment's labels hold the soft rows made
  // from these when the batch is finished); empty otherwise.
  std::vector<std::int64_t> class_labels;
  // The device rings whose copies of this slot may still be reading its host bytes; cleared
  // (after waiting) before the slot is planned again.
  std::vector<std::shared_ptr<delivery::DeviceRing>> copied_to;
  // Readers holding it (bit k: reader k). Invariant: state is LEASED iff leased_by != 0,
  // once READY; it goes FREE only when every expected reader is past it (Job::consumed).
  std::uint64_t leased_by = 0;
  std::vector<std::chrono::steady_clock::time_point> leased_at;  // per reader (stuck readers)

  BatchPos pos() const { return {epoch, batch_index}; }
  bool live() const { return (state == SlotState::kFilling && !stale) || state == SlotState::kReady || state == SlotState::kLeased; }
};

struct Job::Ring {
  mutable std::mutex mu;
  std::uint32_t rank = 0;
  std::vector<Slot> slots;                 // guarded by mu
  std::shared_ptr<EpochStream> planning;   // guarded by mu
  std::vector<Reader> readers;             // `readers` of the job; guarded by mu

  bool any_attached() const {
    for (const auto& r : readers) if (r.attached) return true;
    return false;
  }
};

}  // namespace stoker::job
